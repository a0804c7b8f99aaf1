"""Writes the recall corpus: ``sessions.jsonl`` and ``questions.jsonl`` beside this file.

Written for Hermes (nothing downloaded): multi-session conversations between one
assistant and many people, spread over 2023-2025, in English, Chinese and Japanese. Each
*fact* is a short exchange planted in a session among everyday filler; every question is
typed the way a person asks it and names the message that answers it (its evidence).
The same fact template appears in several sessions with other people, places and dates,
so the other instances are the distractors a search must rank below the right one.

Question kinds:

* ``direct``: the question shares the answering message's key words;
* ``reply``: the question uses the words of the user's turn, the answer is the reply;
* ``paraphrase``: other forms of the words (dancing → dances, opened → opening);
* ``possessive``: "Jon's dog", "Maria's flight";
* ``date``: names the session's month/year ("in March 2024") while the text says
  "yesterday" or "this morning";
* ``rare``: three rare words of a long message among short messages sharing a common word;
* ``zh`` / ``ja``: questions in Chinese / Japanese about Chinese / Japanese sessions.

A question whose exact wording is also asked about another session lists that
session's evidence under ``also`` (either answer counts). Each question carries ``half`` (``tune`` or ``held``), drawn with a fixed seed when the
corpus is generated, before any tuning. Rerun to regenerate identical files:
``python benchmarks/recall_corpus/generate.py``.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime
from pathlib import Path

SEED = 20260314
HERE = Path(__file__).resolve().parent

PEOPLE = ["Jon", "Maria", "Priya", "Kenji", "Fatima", "Lars", "Aisha", "Diego", "Olga", "Tomasz",
          "Nadia", "Samuel", "Ingrid", "Ravi", "Chloe", "Mateo", "Yusuf", "Hannah", "Bruno", "Leila",
          "Oscar", "Mei", "Arjun", "Sofia", "Felix", "Amara", "Viktor", "Elena", "Kwame", "Rosa"]

# Each template: slots (name -> choices), messages [(role, text)], questions
# [(kind, text, evidence index)]. {P} is the person, other slots as listed.
TEMPLATES: list[dict] = [
    {"slots": {"animal": ["puppy", "kitten", "rabbit", "parrot", "hamster"],
               "pet": ["Biscuit", "Pepper", "Mochi", "Ziggy", "Clementine", "Noodle", "Waffles"]},
     "msgs": [("user", "My friend {P} just adopted a {animal} from the shelter. What should she buy for the first week?"),
              ("assistant", "For a new {animal}: a quiet corner, the same food the shelter used, and a vet check in the first days."),
              ("user", "She decided to call it {pet}, after her grandmother's nickname."),
              ("assistant", "{pet} is a lovely name, and a sweet way to remember her grandmother.")],
     "qs": [("possessive", "what's the name of {P}'s {animal}?", 2),
            ("paraphrase", "what did {P} name the {animal} she adopted", 2),
            ("reply", "what should {P} buy for a new {animal}?", 1)]},
    {"slots": {"city": ["Lisbon", "Kyoto", "Reykjavik", "Oaxaca", "Tbilisi", "Hanoi", "Porto"],
               "hotel": ["Casa Azul", "the Harbour Inn", "Hotel Meridiano", "the Old Mill guesthouse", "Pension Lumen"],
               "nights": ["three", "four", "five", "six"]},
     "msgs": [("user", "{P} and I are planning a trip to {city}. Where should we stay?"),
              ("assistant", "In {city} I'd pick {hotel}: central, quiet at night, and you can walk to the old town. Book {nights} nights so you have a spare day."),
              ("user", "Great, booked it for {nights} nights.")],
     "qs": [("reply", "where did you suggest we stay in {city}?", 1),
            ("direct", "which hotel in {city} did we book", 1),
            ("possessive", "hotel for the trip with {P} to {city}", 1)]},
    {"slots": {"dance": ["salsa", "tango", "swing", "flamenco", "bachata"],
               "day": ["Tuesdays", "Thursdays", "Saturday mornings", "Wednesday evenings"],
               "studio": ["Ritmo Studio", "the community hall on Elm Street", "Studio Nova", "the Blue Door school"]},
     "msgs": [("user", "{P} has been dancing {dance} for a year now, she goes every week."),
              ("assistant", "A year of {dance} is a real commitment! Where does she practise?"),
              ("user", "At {studio}, on {day}.")],
     "qs": [("paraphrase", "what dances does {P} do?", 0),
            ("reply", "where does {P} practise {dance}", 2),
            ("paraphrase", "when are {P}'s {dance} dance classes", 2)]},
    {"slots": {"shop": ["bakery", "bookshop", "bike repair shop", "coffee roastery", "flower shop"],
               "month": ["May", "June", "September", "October"],
               "street": ["Canal Street", "Rua Augusta", "Baker Lane", "Mill Road", "Kingsway"]},
     "msgs": [("user", "{P} is finally opening her own {shop}! I want to send something nice."),
              ("assistant", "How exciting. A potted olive tree or a framed print of the street works for a new {shop}. When and where is it?"),
              ("user", "It opens in {month} on {street}.")],
     "qs": [("paraphrase", "when does {P}'s {shop} open?", 2),
            ("paraphrase", "where is the {shop} {P} opened", 2),
            ("reply", "what gift did you suggest for {P}'s new {shop}", 1)]},
    {"slots": {"lang": ["Rust", "Go", "Kotlin", "Elixir", "TypeScript"],
               "err": ["a borrow checker error in the parser", "a deadlock between two goroutines",
                       "a null pointer in the adapter", "a process mailbox that never drained",
                       "an unhandled promise rejection in the uploader"],
               "fix": ["clone the token before the loop", "take both locks in the same order",
                       "initialise the view holder in onCreate", "add a timeout to the receive block",
                       "await the upload inside a try/catch"]},
     "msgs": [("user", "I'm stuck on {err} in my {lang} project, any idea?"),
              ("assistant", "Classic one. The usual fix is to {fix}; then rerun the failing test to confirm."),
              ("user", "That worked, thanks!")],
     "qs": [("reply", "how did we fix {err}?", 1),
            ("reply", "what was the fix for the {lang} bug I was stuck on", 1),
            ("direct", "{err} {lang}", 0)]},
    {"slots": {"dish": ["lasagne", "green curry", "shakshuka", "mushroom risotto", "banana bread", "ramen"],
               "swap": ["cottage cheese instead of ricotta", "coconut yoghurt instead of coconut milk",
                        "smoked paprika instead of chorizo", "oat milk instead of cream",
                        "maple syrup instead of sugar", "miso instead of tare"]},
     "msgs": [("user", "I'm cooking {dish} for {P} tonight but she can't have some of the usual ingredients."),
              ("assistant", "No problem: for {dish}, use {swap}. It keeps the texture and most of the flavour."),
              ("user", "Perfect, she loved it.")],
     "qs": [("reply", "what substitute did you suggest for the {dish}?", 1),
            ("possessive", "ingredient swap in the {dish} I made for {P}", 1),
            ("paraphrase", "which ingredients did I substitute when cooking {dish}", 1)]},
    {"slots": {"event": ["dentist", "physiotherapist", "eye doctor", "dermatologist", "cardiologist"],
               "finding": ["a small cavity in a molar", "a strained calf muscle", "a slightly stronger prescription",
                           "a harmless mole", "a normal ECG but high cholesterol"],
               "next": ["a filling in two weeks", "six sessions of exercises", "new glasses",
                        "a check-up next year", "a blood test in three months"]},
     "date": True,
     "msgs": [("user", "Went to the {event} yesterday. They found {finding}."),
              ("assistant", "Thanks for telling me. So the plan is {next}? I can remind you."),
              ("user", "Yes, please remind me.")],
     "qs": [("date", "what did the {event} say in {month} {year}?", 0),
            ("date", "my {event} appointment on {day} {month}", 0),
            ("direct", "what did the {event} find", 0)]},
    {"slots": {"book": ["The Left Hand of Darkness", "Piranesi", "A Gentleman in Moscow", "Station Eleven",
                        "The Remains of the Day", "Klara and the Sun", "Middlemarch"],
               "club": ["the library book club", "our office book club", "a reading group at the cafe"]},
     "msgs": [("user", "{P} recommended a novel for {club}, but I forgot which one."),
              ("assistant", "From what you told me before, it was {book}. It's a good pick for discussion."),
              ("user", "Right, {book}! Thanks.")],
     "qs": [("possessive", "which book did {P} recommend?", 1),
            ("reply", "what novel was recommended for {club}", 1),
            ("paraphrase", "the book {P} recommends", 1)]},
    {"slots": {"car": ["Skoda Octavia", "Toyota Corolla", "Volvo V60", "Mazda CX-5", "Honda Civic"],
               "part": ["the timing belt", "the rear brake pads", "the clutch", "the alternator", "the water pump"],
               "cost": ["340", "180", "720", "450", "260"]},
     "msgs": [("user", "The garage called about my {car}."),
              ("assistant", "What did they say?"),
              ("user", "They have to replace {part}, and the quote is {cost} euros."),
              ("assistant", "{cost} euros for {part} on a {car} is a fair price; ask them to keep the old part.")],
     "qs": [("direct", "how much was the quote to replace {part}?", 2),
            ("paraphrase", "what was the garage replacing on my {car}", 2),
            ("reply", "did you think the garage price for the {car} was fair", 3)]},
    {"slots": {"plant": ["tomatoes", "basil", "a fiddle leaf fig", "orchids", "courgettes", "a lemon tree"],
               "problem": ["yellow leaves", "white powder on the leaves", "drooping stems", "brown leaf tips", "tiny black flies"],
               "cause": ["overwatering", "powdery mildew", "too little light", "dry air from the radiator", "fungus gnats in wet soil"]},
     "msgs": [("user", "My {plant} have {problem}, what's going on?"),
              ("assistant", "{problem} on {plant} usually means {cause}. Let the soil dry out and move them somewhere brighter."),
              ("user", "I'll try that.")],
     "qs": [("reply", "why did my {plant} have {problem}", 1),
            ("paraphrase", "what was causing the {problem} on the {plant}?", 1),
            ("direct", "{plant} {problem}", 0)]},
    {"slots": {"race": ["half marathon", "10k", "trail race", "triathlon", "marathon"],
               "time": ["1:52", "48:10", "2:31", "3:05", "4:12"],
               "place": ["Berlin", "Valencia", "Edinburgh", "Copenhagen", "Porto"]},
     "date": True,
     "msgs": [("user", "Ran the {place} {race} this morning! Finished in {time}."),
              ("assistant", "Congratulations! {time} in {place} is a great result. How do your legs feel?")],
     "qs": [("date", "what was my {race} time in {month} {year}?", 0),
            ("direct", "my finishing time at the {place} {race}", 0),
            ("paraphrase", "how fast did I run in {place}", 0)]},
    {"slots": {"gift": ["a pottery class", "noise-cancelling headphones", "a telescope", "a cast iron pan",
                        "a bread-making kit", "a vintage film camera"],
               "occasion": ["birthday", "anniversary", "graduation", "retirement"]},
     "msgs": [("user", "What should I get {P} for her {occasion}? She likes making things and being outdoors."),
              ("assistant", "Given that, {gift} would suit her: something she can use for years."),
              ("user", "Good idea, I ordered it.")],
     "qs": [("reply", "what did you suggest I get {P} for her {occasion}", 1),
            ("possessive", "{P}'s {occasion} present idea", 1),
            ("reply", "gift ideas for someone who likes making things and being outdoors", 1)]},
    {"slots": {"tool": ["Postgres", "Redis", "Kafka", "Elasticsearch", "RabbitMQ", "MongoDB"],
               "setting": ["max_connections to 400", "maxmemory-policy to allkeys-lru", "retention.ms to seven days",
                           "the refresh interval to 30s", "the prefetch count to 50", "the WiredTiger cache to 8 GB"]},
     "msgs": [("user", "Our {tool} cluster keeps falling over under load at work."),
              ("assistant", "Set {setting} and watch the metrics for a day; that is usually the bottleneck."),
              ("user", "Changed it, it's stable now.")],
     "qs": [("reply", "which {tool} setting did we change?", 1),
            ("reply", "how did we stabilise the {tool} cluster under load", 1),
            ("direct", "{tool} {setting}", 1)]},
    {"slots": {"kid": ["son", "daughter", "nephew", "niece"],
               "sport": ["football", "swimming", "chess", "judo", "violin"],
               "coach": ["Mr Okafor", "Coach Lindqvist", "Ms Moreau", "Sensei Tanaka", "Mrs Patel"]},
     "msgs": [("user", "{P}'s {kid} started {sport} lessons this term."),
              ("assistant", "Nice! Who's teaching?"),
              ("user", "{coach}, the kids love them.")],
     "qs": [("reply", "who teaches {sport} to {P}'s {kid}?", 2),
            ("possessive", "{P}'s {kid}'s {sport} coach", 2),
            ("paraphrase", "what lessons did {P}'s {kid} start", 0)]},
    {"slots": {"sym": ["migraines", "lower back pain", "trouble sleeping", "heartburn", "tight shoulders"],
               "advice": ["keeping a trigger diary and drinking more water", "a ten-minute stretch every morning",
                          "no screens after 10 pm and a fixed wake-up time", "smaller dinners eaten before 8",
                          "moving the monitor to eye level"]},
     "msgs": [("user", "I keep getting {sym} lately."),
              ("assistant", "I'm sorry. Things that often help with {sym}: {advice}. If it lasts more than a few weeks, see a doctor."),
              ("user", "Ok, I'll try.")],
     "qs": [("reply", "what did you recommend for my {sym}?", 1),
            ("paraphrase", "tips you gave me when I was getting {sym}", 1),
            ("direct", "{sym} advice", 1)]},
    {"slots": {"movie": ["Past Lives", "Arrival", "Paddington 2", "Spirited Away", "The Grand Budapest Hotel", "Aftersun"],
               "verdict": ["cried at the ending", "fell asleep halfway", "wants to see it again", "thought it was too slow",
                           "laughed the whole time"]},
     "msgs": [("user", "Watched {movie} with {P} last night."),
              ("assistant", "What did you both think?"),
              ("user", "I loved it, {P} {verdict}.")],
     "qs": [("possessive", "what did {P} think of {movie}?", 2),
            ("paraphrase", "which movie did I watch with {P}", 0),
            ("reply", "did {P} like the film we watched", 2)]},
    {"slots": {"account": ["gas bill", "phone contract", "gym membership", "car insurance", "internet plan"],
               "amount": ["38", "52", "19", "64", "27"],
               "provider": ["Octopus", "Vodafone", "PureGym", "Admiral", "Virgin Media"]},
     "msgs": [("user", "Can you help me figure out if I'm overpaying for my {account}?"),
              ("assistant", "Sure. How much are you paying and who is it with?"),
              ("user", "{amount} pounds a month with {provider}."),
              ("assistant", "{amount} a month with {provider} is above average for a {account}; call them and ask for the retention deal.")],
     "qs": [("direct", "how much do I pay for my {account}?", 2),
            ("paraphrase", "which provider is my {account} with", 2),
            ("reply", "was I overpaying for the {account}", 3)]},
    {"slots": {"course": ["Spanish", "Japanese", "pottery", "data science", "piano", "sign language"],
               "teacher": ["Lucia", "Takeshi", "Bea", "Dr Nwosu", "Anton", "Grace"],
               "weekday": ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]},
     "msgs": [("user", "I signed up for a {course} course, classes are every {weekday} evening."),
              ("assistant", "Great choice. Who is the teacher?"),
              ("user", "Someone called {teacher}, {P} took the same course last year.")],
     "qs": [("reply", "who teaches my {course} course", 2),
            ("direct", "which evening is my {course} class", 0),
            ("paraphrase", "the {course} classes I signed up for", 0)]},
    {"slots": {"device": ["laptop", "phone", "router", "printer", "smartwatch"],
               "brand": ["ThinkPad X1", "Pixel 8", "Fritz!Box 7590", "Brother HL-L2350", "Garmin Venu"],
               "issue": ["battery drains overnight", "keeps dropping Wi-Fi", "won't connect to the network",
                         "prints blank pages", "stopped syncing heart rate"],
               "remedy": ["disable wake on LAN in the BIOS", "turn off adaptive connectivity",
                          "factory reset and update the firmware", "clean the drum unit", "re-pair it in the app"]},
     "msgs": [("user", "My {brand} {device} {issue}."),
              ("assistant", "Try this: {remedy}. That solves it in most cases for the {brand}.")],
     "qs": [("reply", "how did you tell me to fix my {device}", 1),
            ("reply", "fix for {brand} that {issue}", 1),
            ("paraphrase", "my {device} problem with the {brand}", 0)]},
    {"slots": {"proj": ["kitchen renovation", "bathroom tiling", "garden shed", "loft conversion", "new fence"],
               "builder": ["Hughes & Sons", "BuildRight", "Kowalski Construction", "Green Oak Builders", "Mendes Renovations"],
               "weeks": ["three", "five", "eight", "twelve"]},
     "msgs": [("user", "We finally picked a builder for the {proj}."),
              ("assistant", "Who did you go with, and how long will it take?"),
              ("user", "{builder}. They say about {weeks} weeks.")],
     "qs": [("reply", "which builder did we choose for the {proj}?", 2),
            ("direct", "how long will the {proj} take", 2),
            ("paraphrase", "builders we picked", 2)]},
    # 'rare': a long message holding three rare terms; short filler shares common words.
    {"slots": {"a": ["zeolite", "obsidian", "vermiculite", "perlite", "basalt"],
               "b": ["terrarium", "bonsai", "aquarium", "vivarium", "paludarium"],
               "c": ["springtails", "isopods", "nerite snails", "cherry shrimp", "earthworms"]},
     "msgs": [("user", "I want to build something for my desk at home, maybe with some plants, what do you think?"),
              ("assistant", "A nice project for a rainy weekend. Start with a layer of {a} for drainage, then soil and moss; "
                            "for a small {b} choose slow plants, mist twice a week and add {c} as a clean-up crew so mould "
                            "never gets a foothold. Keep it out of direct sun and open the lid for an hour every few days.")],
     "qs": [("rare", "{a} layer for the {b} with {c}", 1),
            ("rare", "clean-up crew of {c} for my {b}", 1),
            ("rare", "what do I put at the bottom of a {b} with {c}? {a}?", 1)]},
    {"slots": {"a": ["sourdough", "kombucha", "kimchi", "sauerkraut", "kefir"],
               "b": ["hydration", "scoby", "gochugaru", "brine", "grains"],
               "c": ["banneton", "airlock", "fermentation crock", "mason jar", "cheesecloth"]},
     "msgs": [("user", "I'm getting into fermenting at home, what do I need?"),
              ("assistant", "For {a} the key things are getting the {b} right, keeping it at a steady room temperature, and "
                            "having a {c}; label everything with the date and taste it every day, it changes faster than you expect.")],
     "qs": [("rare", "{a} {b} and {c}", 1),
            ("rare", "what did you say about {b} for my {a}", 1),
            ("rare", "do I need a {c} for {a}?", 1)]},
]

ZH_TEMPLATES: list[dict] = [
    {"slots": {"P": ["小王", "小李", "阿芳", "老陈", "小美"], "pet": ["豆豆", "球球", "花花", "咪咪", "旺财"],
               "animal": ["猫", "狗", "兔子"]},
     "msgs": [("user", "{P}上周领养了一只{animal}，第一周要注意什么？"),
              ("assistant", "刚到家的{animal}需要安静的角落，先用收容所同样的粮食，几天内带去体检。"),
              ("user", "{P}给它起名叫{pet}。")],
     "qs": [("zh", "{P}的{animal}叫什么名字？", 2), ("zh", "{P}领养{animal}以后要注意什么", 1)]},
    {"slots": {"city": ["成都", "西安", "大理", "青岛", "厦门"], "hotel": ["锦江宾馆", "古城客栈", "海景酒店", "梧桐民宿", "山水酒店"],
               "nights": ["三", "四", "五"]},
     "msgs": [("user", "我和家人下个月去{city}旅游，住哪里比较好？"),
              ("assistant", "在{city}推荐住{hotel}，位置在市中心，晚上很安静，订{nights}晚比较合适。"),
              ("user", "好的，已经订了{hotel}。")],
     "qs": [("zh", "去{city}旅游你推荐住哪个酒店？", 1), ("zh", "我们在{city}订了哪家酒店", 2)]},
    {"slots": {"dish": ["红烧肉", "麻婆豆腐", "糖醋排骨", "宫保鸡丁", "西红柿炒蛋"],
               "tip": ["先焯水再用冰糖炒糖色", "用郫县豆瓣酱和花椒粉", "醋和糖按一比一调汁", "花生米最后放保持酥脆", "鸡蛋先炒到半熟盛出"]},
     "msgs": [("user", "我想做{dish}，但总是做不好。"),
              ("assistant", "做{dish}的关键是{tip}，火候不要太大。"),
              ("user", "试了一下，成功了！")],
     "qs": [("zh", "做{dish}的诀窍是什么？", 1), ("zh", "你教我怎么做{dish}", 1)]},
    {"slots": {"sym": ["失眠", "头疼", "腰疼", "胃不舒服", "肩膀酸痛"],
               "advice": ["睡前一小时不看手机", "多喝水并记录诱因", "每天早上拉伸十分钟", "晚饭少吃并且早一点吃", "把显示器调到眼睛高度"]},
     "msgs": [("user", "最近老是{sym}，怎么办？"),
              ("assistant", "{sym}的话可以试试{advice}，如果持续几周要去看医生。")],
     "qs": [("zh", "我{sym}的时候你建议我怎么做？", 1), ("zh", "{sym}有什么办法", 1)]},
    {"slots": {"P": ["张老师", "刘经理", "王阿姨", "赵同学", "孙医生"], "book": ["三体", "活着", "围城", "平凡的世界", "红楼梦"]},
     "msgs": [("user", "{P}给读书会推荐了一本小说，我忘了是哪本。"),
              ("assistant", "你之前说过，是《{book}》，很适合大家讨论。")],
     "qs": [("zh", "{P}推荐的是哪本书？", 1), ("zh", "读书会那本小说叫什么", 1)]},
    {"slots": {"part": ["刹车片", "电瓶", "轮胎", "空调压缩机", "正时皮带"], "cost": ["八百", "一千二", "六百五", "两千", "九百"]},
     "msgs": [("user", "修车厂打电话说我的车要换{part}。"),
              ("assistant", "他们报价多少？"),
              ("user", "报价{cost}块钱。")],
     "qs": [("zh", "换{part}要多少钱？", 2), ("zh", "修车厂给我的车换什么", 0)]},
    {"slots": {"course": ["日语", "钢琴", "游泳", "书法", "编程"], "teacher": ["李老师", "陈老师", "周老师", "吴老师", "郑老师"],
               "weekday": ["周一", "周二", "周三", "周四", "周五"]},
     "msgs": [("user", "我报了一个{course}课，每{weekday}晚上上课。"),
              ("assistant", "太好了！老师是谁？"),
              ("user", "是{teacher}，听说教得很好。")],
     "qs": [("zh", "我的{course}课老师是谁？", 2), ("zh", "{course}课是星期几上", 0)]},
]

JA_TEMPLATES: list[dict] = [
    {"slots": {"P": ["田中さん", "佐藤さん", "鈴木さん", "高橋さん", "山本さん"], "pet": ["モカ", "こむぎ", "ソラ", "きなこ", "レオ"],
               "animal": ["猫", "犬", "うさぎ"]},
     "msgs": [("user", "{P}が先週{animal}を保護施設から迎えました。最初の一週間は何に気をつければいいですか？"),
              ("assistant", "新しい{animal}には静かな場所を用意して、施設と同じごはんを続けてください。数日以内に動物病院で健康診断を。"),
              ("user", "{P}は{animal}に{pet}という名前をつけました。")],
     "qs": [("ja", "{P}の{animal}の名前は何ですか？", 2), ("ja", "{P}が{animal}を迎えたとき何に気をつける？", 1)]},
    {"slots": {"city": ["京都", "札幌", "福岡", "金沢", "那覇"], "hotel": ["町家の宿", "駅前ホテル", "海辺の旅館", "白川荘", "港のホテル"]},
     "msgs": [("user", "来月{city}に旅行します。どこに泊まるのがいいですか？"),
              ("assistant", "{city}なら{hotel}がおすすめです。中心部にあって夜も静かです。"),
              ("user", "{hotel}を予約しました。")],
     "qs": [("ja", "{city}旅行でおすすめされたホテルはどこ？", 1), ("ja", "{city}でどこに泊まることにした？", 2)]},
    {"slots": {"dish": ["肉じゃが", "カレー", "親子丼", "味噌汁", "天ぷら"],
               "tip": ["じゃがいもを最初に炒めること", "玉ねぎを飴色になるまで炒めること", "卵を二回に分けて入れること",
                       "味噌は火を止めてから溶くこと", "衣を冷水で作ること"]},
     "msgs": [("user", "{dish}を作りたいけど、いつもうまくいきません。"),
              ("assistant", "{dish}のコツは{tip}です。火を強くしすぎないでください。")],
     "qs": [("ja", "{dish}のコツは何？", 1), ("ja", "{dish}をうまく作る方法を教えてもらったよね", 1)]},
    {"slots": {"sym": ["不眠", "頭痛", "腰痛", "肩こり", "胃もたれ"],
               "advice": ["寝る前にスマホを見ないこと", "水をたくさん飲むこと", "毎朝十分ストレッチすること",
                          "モニターを目の高さにすること", "夕食を軽くすること"]},
     "msgs": [("user", "最近{sym}がひどいです。"),
              ("assistant", "{sym}には{advice}を試してみてください。数週間続くなら病院へ。")],
     "qs": [("ja", "{sym}のときのアドバイスは？", 1), ("ja", "{sym}にはどうすればいい", 1)]},
    {"slots": {"part": ["ブレーキパッド", "バッテリー", "タイヤ", "エアコン", "タイミングベルト"],
               "cost": ["三万円", "二万五千円", "八万円", "五万円", "四万円"]},
     "msgs": [("user", "整備工場から電話があって、車の{part}を交換する必要があるそうです。"),
              ("assistant", "見積もりはいくらでしたか？"),
              ("user", "{cost}だそうです。")],
     "qs": [("ja", "{part}の交換はいくら？", 2), ("ja", "整備工場で何を交換する？", 0)]},
    {"slots": {"course": ["英会話", "ピアノ", "水泳", "書道", "プログラミング"], "teacher": ["森先生", "林先生", "石井先生", "小川先生", "松本先生"],
               "weekday": ["月曜日", "火曜日", "水曜日", "木曜日", "金曜日"]},
     "msgs": [("user", "{course}の教室に申し込みました。毎週{weekday}の夜です。"),
              ("assistant", "いいですね！先生はどなたですか？"),
              ("user", "{teacher}です。")],
     "qs": [("ja", "{course}の先生は誰？", 2), ("ja", "{course}教室は何曜日？", 0)]},
    {"slots": {"P": ["中村さん", "小林さん", "加藤さん", "吉田さん", "山田さん"], "book": ["ノルウェイの森", "コンビニ人間", "博士の愛した数式", "火花", "容疑者Xの献身"]},
     "msgs": [("user", "{P}が読書会に小説をすすめてくれたけど、題名を忘れました。"),
              ("assistant", "前に話してくれた本なら『{book}』です。")],
     "qs": [("ja", "{P}がすすめた本は？", 1), ("ja", "読書会の小説の題名は何だっけ", 1)]},
]

FILLER_EN = [
    ("user", "Can you help me write a short email to my landlord about the broken heating?"),
    ("assistant", "Sure: 'Hi, the heating in the flat stopped working yesterday. Could someone come and take a look this week? Thanks.'"),
    ("user", "What's a good stretch after a long day at the desk?"),
    ("assistant", "Try a doorway chest stretch: forearms on the frame, step through gently, hold for thirty seconds."),
    ("user", "How long should I boil an egg for a runny yolk?"),
    ("assistant", "About six minutes from boiling water, then straight into cold water."),
    ("user", "Remind me what time zone Lisbon is in?"),
    ("assistant", "Lisbon uses Western European Time, the same as London."),
    ("user", "I need a name for my new project, something short."),
    ("assistant", "Some ideas: Lumen, Brisk, Tandem, Quill. Short, easy to say, and the domains might be free."),
    ("user", "What's the difference between a latte and a flat white?"),
    ("assistant", "A flat white has less milk and a thinner layer of microfoam, so the coffee tastes stronger."),
    ("user", "Can you summarise the meeting notes I pasted earlier?"),
    ("assistant", "The team agreed to ship on Friday, move the retro to Monday, and ask design for the new icons."),
    ("user", "My week has been crazy, I barely slept."),
    ("assistant", "That sounds exhausting. Is there one thing you could drop this week to get some rest?"),
    ("user", "What's a good book for a long flight?"),
    ("assistant", "Something gripping but light: a mystery or a travel memoir works well on a plane."),
    ("user", "How do I convert Celsius to Fahrenheit again?"),
    ("assistant", "Multiply by 9, divide by 5, then add 32."),
    ("user", "Thanks, that was really helpful."),
    ("assistant", "Happy to help! Anything else on your mind today?"),
    ("user", "Can you suggest a name for a friend's new dog?"),
    ("assistant", "Classic picks are Max, Luna and Charlie; something quirkier could be Pickle or Noodle."),
    ("user", "What should I pack for a weekend trip in the mountains?"),
    ("assistant", "Layers, a rain jacket, good boots, a headlamp, snacks and a paper map in case your phone dies."),
    ("user", "I want to start running again, where do I begin?"),
    ("assistant", "Begin with run-walk intervals three times a week and add a minute of running each week."),
    ("user", "How do I get red wine out of a carpet?"),
    ("assistant", "Blot, don't rub; then cold water and a little washing-up liquid, and blot again."),
    ("user", "What's a quick dinner with what's in my fridge: eggs, spinach, feta?"),
    ("assistant", "A spinach and feta omelette, or bake them together as a quick frittata."),
    ("user", "My friend is coming over this weekend, any ideas for what to do?"),
    ("assistant", "A walk and a picnic if the weather holds, or a board game night with homemade pizza."),
    ("user", "Can you help me plan my week? I have too many meetings."),
    ("assistant", "Block two mornings for focused work, batch the meetings into the afternoons, and decline the optional ones."),
    ("user", "What's the best way to learn new words in a language?"),
    ("assistant", "Spaced repetition with a flashcard app, and reading things you actually enjoy."),
    ("user", "How do I fix a squeaky door?"),
    ("assistant", "A drop of oil on the hinge pin, open and close it a few times, and wipe off the extra."),
    ("user", "I'm thinking of buying a new bike for commuting."),
    ("assistant", "For commuting, a hybrid with mudguards, a rack and hub gears needs the least maintenance."),
    ("user", "What time is it in Tokyo when it's noon in Berlin?"),
    ("assistant", "Eight in the evening in Tokyo (seven hours ahead in summer)."),
    ("user", "Could you check my cover letter for typos?"),
    ("assistant", "Two small ones: 'recieve' should be 'receive', and 'there team' should be 'their team'. Otherwise it reads well."),
    ("user", "What's a good houseplant that's hard to kill?"),
    ("assistant", "A snake plant or a ZZ plant: low light is fine and they forgive forgotten watering."),
    ("user", "How much water should I drink a day?"),
    ("assistant", "Roughly two litres for most adults, more when it's hot or you exercise."),
    ("user", "The python script keeps timing out when it calls the API."),
    ("assistant", "Add a timeout and a retry with backoff to the request, and log how long each call takes."),
    ("user", "Which name sounds better for the cafe, Sunday or Ember?"),
    ("assistant", "Ember feels warmer and more memorable; Sunday is friendlier. I'd lean towards Ember."),
]
FILLER_ZH = [
    ("user", "今天天气怎么样？适合出去走走吗？"), ("assistant", "今天多云，气温适中，很适合散步。"),
    ("user", "帮我写一封简短的请假邮件。"), ("assistant", "您好，我明天身体不适，想请假一天，工作已经安排好了，谢谢。"),
    ("user", "周末有什么好玩的推荐吗？"), ("assistant", "可以去公园野餐，或者在家和朋友玩桌游。"),
    ("user", "最近工作压力好大。"), ("assistant", "辛苦了，试着每天留一点时间给自己，早点休息。"),
    ("user", "这个名字好听吗？"), ("assistant", "好听，简单又好记。"),
    ("user", "谢谢你的帮助！"), ("assistant", "不客气，有什么需要随时告诉我。"),
    ("user", "怎么学好英语单词？"), ("assistant", "用间隔重复的卡片软件，每天坚持十五分钟。"),
    ("user", "晚饭吃什么好呢？家里有鸡蛋和西红柿。"), ("assistant", "可以做个西红柿鸡蛋面，又快又好吃。"),
]
FILLER_JA = [
    ("user", "今日の天気はどうですか？散歩に行けますか？"), ("assistant", "今日はくもりで気温もちょうどいいので、散歩にぴったりです。"),
    ("user", "上司への短いメールを手伝ってください。"), ("assistant", "お疲れさまです。明日は体調不良のため休ませていただきます。よろしくお願いします。"),
    ("user", "週末のおすすめはありますか？"), ("assistant", "公園でピクニックか、友達とボードゲームはいかがですか。"),
    ("user", "最近仕事が忙しすぎます。"), ("assistant", "お疲れさまです。少しでも自分の時間を作って早めに休んでください。"),
    ("user", "ありがとう、助かりました！"), ("assistant", "どういたしまして。また何でも聞いてください。"),
    ("user", "英単語を覚えるいい方法は？"), ("assistant", "間隔反復のカードアプリで毎日十五分続けることです。"),
    ("user", "晩ごはんは何がいいかな？卵とトマトがあります。"), ("assistant", "トマトと卵の炒め物なら早くておいしいですよ。"),
]

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
INSTANCES = 5  # sessions per English template (distractors for each other)
CJK_INSTANCES = 5


def _fill(text: str, slots: dict[str, str]) -> str:
    return text.format(**slots)


def _when(rng: random.Random) -> datetime:
    day = rng.randrange(0, 3 * 365)
    base = datetime(2023, 1, 1, 11, 0, tzinfo=UTC).timestamp() + day * 86400
    return datetime.fromtimestamp(base + rng.randrange(0, 6 * 3600), UTC)


def _pick(rng: random.Random, slots: dict[str, list[str]], used: set[tuple]) -> dict[str, str]:
    for _ in range(50):
        chosen = {k: rng.choice(v) for k, v in slots.items()}
        key = tuple(sorted(chosen.items()))
        if key not in used:
            used.add(key)
            return chosen
    return chosen


def build() -> tuple[list[dict], list[dict]]:
    rng = random.Random(SEED)
    sessions: list[dict] = []
    questions: list[dict] = []
    plans: list[tuple[str, dict, int]] = []  # (lang, template, instance)
    for t in TEMPLATES:
        plans += [("en", t, i) for i in range(INSTANCES)]
    for t in ZH_TEMPLATES:
        plans += [("zh", t, i) for i in range(CJK_INSTANCES)]
    for t in JA_TEMPLATES:
        plans += [("ja", t, i) for i in range(CJK_INSTANCES)]
    rng.shuffle(plans)
    used: dict[int, set] = {}
    people = list(PEOPLE)
    for n, (lang, template, _inst) in enumerate(plans):
        when = _when(rng)
        slots = _pick(rng, template["slots"], used.setdefault(id(template), set()))
        if "P" not in slots:
            slots["P"] = rng.choice(people)
        slots.update(day=str(when.day), month=MONTHS[when.month - 1], year=str(when.year))
        filler = {"en": FILLER_EN, "zh": FILLER_ZH, "ja": FILLER_JA}[lang]
        pairs = [filler[i:i + 2] for i in range(0, len(filler), 2)]
        before = rng.sample(pairs, rng.randint(1, 4))
        after = rng.sample(pairs, rng.randint(0, 3))
        msgs = [m for p in before for m in p]
        offset = len(msgs)
        msgs += [(role, _fill(text, slots)) for role, text in template["msgs"]]
        msgs += [m for p in after for m in p]
        sid = f"recall_{n:04d}"
        ts = when.timestamp()
        sessions.append({"id": sid, "lang": lang, "started_at": ts,
                         "messages": [{"role": r, "content": c, "timestamp": ts + 30 * i}
                                      for i, (r, c) in enumerate(msgs)]})
        for kind, text, evidence in template["qs"]:
            questions.append({"id": f"q{len(questions):04d}", "kind": kind, "lang": lang,
                              "question": _fill(text, slots), "session": sid,
                              "evidence": offset + evidence})
    # A question typed the same way about two sessions (a generic "what was the novel
    # for the book club called?") has more than one right answer: each of them counts.
    answers: dict[str, list[list]] = {}
    for q in questions:
        answers.setdefault(q["question"], []).append([q["session"], q["evidence"]])
    for q in questions:
        others = [a for a in answers[q["question"]] if a != [q["session"], q["evidence"]]]
        if others:
            q["also"] = others
    split = random.Random(SEED + 1)
    order = list(range(len(questions)))
    split.shuffle(order)
    held = set(order[: len(order) // 2])
    for i, q in enumerate(questions):
        q["half"] = "held" if i in held else "tune"
    return sessions, questions


def main() -> None:
    sessions, questions = build()
    with open(HERE / "sessions.jsonl", "w", encoding="utf-8") as f:
        for s in sessions:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    with open(HERE / "questions.jsonl", "w", encoding="utf-8") as f:
        for q in questions:
            f.write(json.dumps(q, ensure_ascii=False) + "\n")
    kinds: dict[str, int] = {}
    for q in questions:
        kinds[q["kind"]] = kinds.get(q["kind"], 0) + 1
    print(f"{len(sessions)} sessions, {sum(len(s['messages']) for s in sessions)} messages, "
          f"{len(questions)} questions {kinds}")


if __name__ == "__main__":
    main()

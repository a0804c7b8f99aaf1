"""Secret formats (each in the context it usually appears in) and ordinary text that must
pass untouched. Shared by the unit and end-to-end redaction tests.

The secrets are fake, built from a seeded generator at import time, in the shape the
vendors publish (prefix, alphabet, length), so that nothing here is a real credential
and no scanner mistakes this file for a leak.
"""

from __future__ import annotations

import random
import string
from typing import NamedTuple

_RNG = random.Random(1313)
ALNUM = string.ascii_letters + string.digits
UPPER = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"


def rand(n: int, alphabet: str = ALNUM) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(n))


class Format(NamedTuple):
    """``text`` contains ``secret``; after redaction ``secret`` must be gone."""

    id: str
    text: str
    secret: str


def _f(fid: str, template: str, secret: str) -> Format:
    return Format(fid, template.format(s=secret), secret)


_PEM_BODY = "\n".join(rand(64, B64) for _ in range(6))
_JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJ" + rand(40, URLSAFE) + "." + rand(43, URLSAFE))

FORMATS: list[Format] = [
    _f("aws-access-key-id", "aws configure set aws_access_key_id AKIA{s}", rand(16, UPPER)),
    _f("aws-secret-access-key-env", "export AWS_SECRET_ACCESS_KEY={s}", rand(40, B64)),
    _f("aws-secret-access-key-ini", "[default]\naws_secret_access_key = {s}\nregion = eu-west-1",
       rand(40, B64)),
    _f("aws-secret-prose", "the aws secret access key for prod is {s} keep it safe", rand(40, B64)),
    _f("github-ghp", "git clone https://github.com/me/repo and use token ghp_{s}", rand(36)),
    _f("github-gho-ghs", "CI runs with ghs_{s} and gho_ for oauth", rand(36)),
    _f("github-pat", "GH_TOKEN=github_pat_{s}", rand(22) + "_" + rand(59)),
    _f("gitlab-glpat", "gitlab personal token: glpat-{s}", rand(20, URLSAFE)),
    _f("slack-bot-token", "SLACK_BOT=xoxb-{s}", "1234567890-1234567890123-" + rand(24)),
    _f("slack-webhook", "POST to https://hooks.slack.com/services/{s}", "T0" + rand(8, UPPER) + "/B0"
       + rand(8, UPPER) + "/" + rand(24)),
    _f("stripe-sk-live", "stripe.api_key = 'sk_live_{s}'", rand(24)),
    _f("stripe-rk-live", "restricted key rk_live_{s} for the reports job", rand(24)),
    _f("stripe-sk-test", "test with sk_test_{s} please", rand(24)),
    _f("openai-proj", "OPENAI_API_KEY=sk-proj-{s}", rand(48, URLSAFE)),
    _f("openai-legacy", "use the key sk-{s} for embeddings", rand(48)),
    _f("anthropic", "my key is sk-ant-api03-{s}", rand(93, URLSAFE)),
    _f("google-api-key", "maps key AIza{s} in the frontend", rand(35, URLSAFE)),
    _f("google-oauth-secret", "client_secret GOCSPX-{s}", rand(28, URLSAFE)),
    _f("private-key-rsa", "-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----", _PEM_BODY),
    _f("private-key-openssh", "here is my key\n-----BEGIN OPENSSH PRIVATE KEY-----\n{s}\n"
       "-----END OPENSSH PRIVATE KEY-----\nthanks", rand(70, B64)),
    _f("jwt", "the session cookie is {s}", _JWT),
    _f("azure-storage", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};"
       "EndpointSuffix=core.windows.net", rand(86, B64) + "=="),
    _f("azure-servicebus", "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;"
       "SharedAccessKey={s}", rand(43, B64) + "="),
    _f("postgres-url", "DATABASE_URL=postgres://app:{s}@db.internal:5432/prod", rand(20)),
    _f("redis-url-no-user", "redis://:{s}@cache:6379/0", rand(24)),
    _f("huggingface", "huggingface-cli login --token hf_{s}", rand(34)),
    _f("npm", "//registry.npmjs.org/:_authToken=npm_{s}", rand(36)),
    _f("pypi", "password = pypi-{s}", "AgEIcHlwaS5vcmc" + rand(60, URLSAFE)),
    _f("twilio-api-key", "twilio key SK{s}", rand(32, HEX)),
    _f("sendgrid", "SENDGRID=SG.{s}", rand(22, URLSAFE) + "." + rand(43, URLSAFE)),
    _f("mailgun", "mailgun api key-{s}", rand(32, HEX)),
    _f("shopify", "shop token shpat_{s}", rand(32, HEX)),
    _f("digitalocean", "doctl auth init -t dop_v1_{s}", rand(64, HEX)),
    _f("telegram-bot", "bot token 123456789:{s}", "AA" + rand(33, URLSAFE.replace("-", ""))),
    _f("discord-bot", "DISCORD={s}", "MT" + rand(22) + "." + rand(6, URLSAFE) + "." + rand(38, URLSAFE)),
    _f("discord-webhook", "https://discord.com/api/webhooks/123456789012345678/{s}", rand(68, URLSAFE)),
    _f("heroku-new", "HEROKU_API_KEY=HRKU-{s}", rand(60, URLSAFE)),
    _f("heroku-uuid", "heroku api key: {s}", "-".join(rand(n, HEX) for n in (8, 4, 4, 4, 12))),
    _f("square", "square access token sq0atp-{s}", rand(22, URLSAFE)),
    _f("databricks", "databricks configure --token dapi{s}", rand(32, HEX)),
    _f("auth-bearer", "curl -H 'Authorization: Bearer {s}' https://api.example.com", rand(40, URLSAFE)),
    _f("auth-basic", "Authorization: Basic {s}", "dXNlcjpwYXNzd29yZDEyMw=="),
    _f("prose-my-password", "my password is {s} don't tell anyone", "hunter2!"),
    _f("prose-wifi", "the wifi password for the office is {s}.", "Tr0ub4dor&3"),
    _f("passwd-colon", "passwd: {s}", "s3cr3t-value"),
    _f("json-api-key", '{{"api_key": "{s}", "model": "x"}}', rand(32)),
    _f("yaml-password", "database:\n  host: db\n  password: {s}\n", "correct-horse-9"),
    _f("ini-secret", "[auth]\nclient_secret = {s}\n", rand(30)),
    _f("env-token", "SERVICE_TOKEN={s}", rand(32)),
    _f("toml-token", 'token = "{s}"', rand(40, URLSAFE)),
    _f("python-kwarg", 'client = Client(api_key="{s}")', rand(40)),
    _f("entropy-weak-name", "signature: {s}", rand(44, B64)),
    _f("cli-user", "curl -u admin:{s} https://ci.example.com/api", "p4ssW0rd"),
    _f("cli-flag", "mysql --password={s} -h db", "Sup3rS3cret"),
    _f("groq", "GROQ=gsk_{s}", rand(52)),
    _f("vault", "VAULT_TOKEN=hvs.{s}", rand(90, URLSAFE)),
]

#: Ordinary text that must come back unchanged.
ORDINARY: list[str] = [
    "Fixed in commit 3f9a1c2e8b7d6a5f4e3d2c1b0a9f8e7d6c5b4a39; see the PR.",
    "git checkout 9fceb02 && git log --oneline",
    "The request id is 123e4567-e89b-12d3-a456-426614174000 for support.",
    "Edit /home/ada/projects/hermes/kernel/config.py and ~/.ssh/config (Host github.com).",
    "![chart](data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==)",
    "Set max_tokens: 4096 and context_length: 200000 in config.yaml.",
    "prompt_tokens=1532 completion_tokens=211 total_tokens=1743",
    "The password is stored in the vault, not in the repo.",
    "If the password is incorrect, the login page says so.",
    "Rotate the API key every 90 days; the token is valid for one hour.",
    "Use {$env: OPENAI_API_KEY} for model.api_key in config.yaml.",
    "api_key: ${OPENAI_API_KEY}",
    "password = os.environ['DB_PASSWORD']",
    "Visit https://docs.python.org/3/library/logging.handlers.html#rotatingfilehandler",
    "sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "The primary key is id; the foreign key: user_id.",
    "SELECT * FROM users WHERE id = 42 AND status = 'active';",
    "Tokens used: 12,345. Key takeaways: keep it short.",
    "He asked: what is the secret to good bread? Time.",
    "def task_runner(): return ask_user('desk-lamp')",
    "https://example.com/search?q=hermes&page=2",
    "export PATH=$HOME/.local/bin:$PATH",
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ada@laptop",
    "Le mot de passe est stocké dans le coffre. 密码保存在保险库里。",
    "token_budget: 2000\nsession_id: 20261123_215716_abc123",
    "The cache key: user:42:profile",
    "Use sk-learn? No: scikit-learn, imported as sklearn.",
    "Call me at +1 555 0100 between 9:00 and 17:00.",
    # code that passes secrets around by name, and documentation placeholders
    "client = Client(base_url=base_url, api_key=api_key)",
    "token = self.token or config.get('token')",
    'key = f"{category}\\0{path}"',
    "if self.api_key:\n    return 'platform'",
    "compression: {provider: null, model: null, api_key: null}",
    "MEM0_API_KEY=m0-...  # from app.mem0.ai",
    "Set `OPENAI_API_KEY=<your key>` or use `postgres://user:password@host/db`.",
    '"api_key": "fake-key"',
]

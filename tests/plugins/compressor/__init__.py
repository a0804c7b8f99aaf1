"""Tests of the compressor context engine (a package so that module names stay unique)."""

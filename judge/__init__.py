"""mr-judge core: item and verdict types, the MC prompt and parser, backends and the judge.

Importing `judge` is cheap (no torch); backends load their engines when built.
"""

from judge.backends import make_backend
from judge.judging import Judge, JudgeConfig
from judge.parser import parse_answer, parse_choice
from judge.prompt import PromptConfig, build_messages
from judge.types import MCItem, Verdict

__all__ = [
    "Judge",
    "JudgeConfig",
    "MCItem",
    "PromptConfig",
    "Verdict",
    "build_messages",
    "make_backend",
    "parse_answer",
    "parse_choice",
]

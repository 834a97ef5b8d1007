"""Seed 001: the LangChain-era TARSy prompt builder, without LangChain.

`templates` holds the seed's text, `components` its section templates, `formatting`
its helpers, `prompts` its builder methods and `builder` the kinds' message lists.
"""

from worker.families.legacy.builder import FAMILY

__all__ = ["FAMILY"]

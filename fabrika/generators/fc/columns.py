"""Row contracts of the FC stages: the columns each reads and writes (``fabrika.pipeline.columns``).

Kept apart from the stage modules so a column has one type wherever it travels
(topics → tools → plans → dialogues → samples) and the stage classes only name them.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from fabrika.pipeline.columns import SAMPLE_COLUMNS, Column, columns
from fabrika.pipeline.preflight import InputFile
from fabrika.schemas import Dialogue
from fabrika.schemas.fc import Persona, Plan, ToolSpec
from fabrika.schemas.rows import RowModel

TOPIC = (
    Column("topic", str, doc="the topic label"),
    Column("description", str, required=False),
    Column("keywords", list[str], required=False),
    Column("lang", str),
    Column("source", str, required=False, doc="'bertopic' or 'llm_expansion'"),
    Column("parent_id", str, required=False),
    Column("n_docs", int, required=False),
)
TOPIC_READS = (TOPIC[0], *(c.optional() for c in TOPIC[1:]))
SPEC = Column("spec", ToolSpec, doc="the tool with its four description tiers")
TOOL = (
    Column("topic_id", str),
    Column("topic", str, required=False),
    Column("lang", str),
    Column("name", str),
    Column("signature", str, doc="canonical parameter signature (dedup key)"),
    SPEC,
)
TOOL_READS = (SPEC, *(c.optional() for c in TOOL if c.name != "spec"))
TOOL_IMPORT = (*TOOL, Column("source", str), Column("warnings", list[Any], required=False))
PLAN = Column("plan", Plan, doc="the reference trajectory the three agents replay")
PLANS = (
    Column("topic_id", str), Column("lang", str), Column("sample_type", str), Column("n_steps", int),
    Column("n_rounds", int), PLAN, Column("rounds", list[dict[str, Any]], required=False),
)
DIALOGUE = Column("dialogue", Dialogue, doc="the episode: messages and the visible tools")
DIALOGUES = (
    Column("plan_id", str), Column("topic_id", str), Column("lang", str), Column("sample_type", str),
    Column("tier", int),
    *(Column(n, int) for n in ("n_wrong", "n_injected", "n_repeat", "n_tool_retries", "n_truncated", "n_steps",
                               "n_targets", "n_messages")),
    DIALOGUE,
)
SAMPLES = columns(SAMPLE_COLUMNS, Column("asks_withheld", bool, required=False),
                  Column("unsupported_numbers", int, required=False))
IRRELEVANCE_READS = (Column("dialogue", Dialogue, alternatives=("prompt",), doc="an episode, or a Sample row"),
                     *(c.optional() for c in SAMPLE_COLUMNS))
IRRELEVANCE = columns(SAMPLE_COLUMNS, Column("source_id", str))

CORPUS = InputFile("corpus[].path", "topic corpus", field_keys=("text_field",),
                   fix="give a jsonl (or parquet) with a string 'text' per record (optional 'lang'), or set corpus[].text_field")
PERSONAS = InputFile("personas.*", "personas file", model=Persona,
                     fix="give a jsonl of Persona records, one per line (see fabrika/data/fc/personas_ru.jsonl)")
TOOL_SOURCES = InputFile("sources[].path", "tools file", format="document",
                         fix="give a JSON/YAML file of OpenAI tools, an MCP tools/list answer or an OpenAPI document")
TOPICS_FILE = InputFile("topics_file", "topics file", fields=("topic",),
                        fix="give a jsonl of topic rows, each with a non-empty 'topic' (optional 'description', 'lang')")


# -- typed views of the rows the FC stages read (fabrika.schemas.rows.RowModel; the columns above) ----------

class TopicRow(RowModel):
    """A topic row (``fc.topics``, or a record of ``fc.tools``' topics file) as ``fc.tools`` reads it (TOPIC_READS)."""

    model_config = ConfigDict(coerce_numbers_to_str=True)  # a topics file may number its topics

    id: str
    topic: str | None = None
    description: str | None = None
    keywords: list[Any] = Field(default_factory=list)
    lang: str | None = None

    @classmethod
    def of(cls, row: dict[str, Any]) -> "TopicRow":
        """A plain-text ``keywords`` value (a topics file's ``"погода"``) is one keyword, not JSON."""
        keywords = row.get("keywords")
        if isinstance(keywords, str) and keywords and not keywords.startswith("["):
            row = {**row, "keywords": [keywords]}
        return cls.model_validate(row)


class CorpusRow(RowModel):
    """A corpus record as ``fc.topics`` reads it (its own input rows: ``text`` and the detected ``lang``)."""

    text: str
    lang: str


class ToolSignatureRow(RowModel):
    """What ``fc.tools_dedup`` reads of a tool row: its id and signature (TOOL_READS)."""

    id: str
    signature: str | None = None

"""The pre-check is an allow-list: what is not named is refused, side doors of allowed libraries too.

Every ``REFUSED`` case passed wave 2's deny-list (``test_wave2_deny_list_let_these_through``
keeps a copy of that lint's rules to prove it); every ``ACCEPTED`` case is what the shipped
sim writer, the trusted verifiers and real models use.
"""

from __future__ import annotations

import ast
import re

import pytest

from fabrika.generators.instruct.prompts import verifier_request
from fabrika.sandbox.precheck import ALLOWED_API, ALLOWED_MODULES, allowed_summary, normalise, precheck, strip_fences
from fabrika.sandbox.verdict_text import MESSAGE_CHARS, clean_message, clean_verdict_error, describe_exception


def fn(body: str, head: str = "") -> str:
    return head + "def evaluate(response):\n" + "".join(f"    {line}\n" for line in body.splitlines())


# (id, code): each reaches a file, a process, the network or the interpreter through something
# wave 2 allowed: a helper inside an allowed library, an exception attribute, a string walk.
REFUSED = [
    ("pymorphy3_json_read", fn("return 'root' in str(pymorphy3.utils.json_read('/etc/passwd'))", "import pymorphy3\n")),
    ("pymorphy3_json_write", fn("pymorphy3.utils.json_write('/tmp/planted', {'x': 1})\nreturn True", "import pymorphy3\n")),
    ("pymorphy3_utils_os", fn("return pymorphy3.utils.os.getcwd() != ''", "import pymorphy3\n")),
    ("pymorphy3_load_dict", fn("return pymorphy3.opencorpora_dict.wrapper.load_dict('/etc') is None", "import pymorphy3\n")),
    ("morph_analyzer_with_path", fn("return pymorphy3.MorphAnalyzer(path='/work') is None", "import pymorphy3\n")),
    ("morph_analyzer_alias_called_later", fn("make = MorphAnalyzer\nreturn make(path='/etc') is None",
                                             "from pymorphy3 import MorphAnalyzer\n")),
    ("morph_dictionary_attribute", fn("return pymorphy3.MorphAnalyzer().dictionary.path != ''", "import pymorphy3\n")),
    ("json_load_file", fn("return json.load(response) is None", "import json\n")),
    ("json_codecs_open", fn("return json.codecs.open('/etc/passwd').read() != ''", "import json\n")),
    ("json_decode_error_doc", fn("try:\n    json.loads(response)\nexcept json.JSONDecodeError as e:\n    return e.doc == ''",
                                 "import json\n")),
    ("os_error_filename", fn("try:\n    return response.missing\nexcept Exception as e:\n    return e.filename is None")),
    ("from_submodule", fn("return True", "from pymorphy3.utils import json_read\n")),
    ("dotted_import", fn("return True", "import pymorphy3.utils\n")),
    ("razdel_rule_module", fn("return razdel.rule is None", "import razdel\n")),
    ("string_formatter", fn("return string.Formatter().get_field('0.x', [response], {}) is None", "import string\n")),
    ("functools_update_wrapper", fn("return functools.update_wrapper is None", "import functools\n")),
    ("typing_get_type_hints", fn("return typing.get_type_hints(evaluate) == {}", "import typing\n")),
    ("module_passed_around", fn("m = re\nreturn m is not None", "import re\n")),
    ("module_rebound", fn("return True", "import re\nre = len\n")),
    ("format_attribute_walk", fn("return '{0.__class__}'.format(response) != ''")),
    ("format_walk_without_dunder", fn("return '{0.real}'.format(1) != ''")),
    ("format_item_walk", fn("return '{0[x]}'.format({'x': 1}) != ''")),
    ("format_on_computed_template", fn("t = '{0.' + '_' * 2 + 'class' + '_' * 2 + '}'\nreturn t.format(response) != ''")),
    ("str_format_unbound", fn("return str.format('{0}', response) != ''")),
    ("format_map", fn("return '{x}'.format_map({'x': 1}) != ''")),
    ("dunder_import_by_string", fn("return __builtins__['__imp' + 'ort__']('os') is None")),
    ("builtins_name", fn("return __builtins__ is None")),
    ("generator_frame", fn("g = (x for x in [1])\nreturn g.gi_frame.f_back is None")),
    ("traceback_frame", fn("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    return e.with_traceback(None) is None")),
    ("exception_tb_frame", fn("try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    return e.tb_frame is None")),
    ("class_mro_subclasses", fn("return ().__class__.__mro__[1].__subclasses__() != []")),
    ("type_three_args", fn("return type('X', (object,), {}) is None")),
    ("getattr_builtin", fn("return getattr(response, 'upper')() != ''")),
    ("open_builtin", fn("return open('/etc/passwd').read() != ''")),
    ("open_rebound_is_still_refused", fn("open = len\nreturn open(response) > 0")),
    ("eval_builtin", fn("return eval('1') == 1")),
    ("unknown_free_name", fn("return os.getcwd() != ''")),
    ("class_definition", "class Checker(object):\n    pass\n\n" + fn("return True")),
    ("attribute_store", fn("re.search = None\nreturn True", "import re\n")),
    ("io_import", fn("return True", "import io\n")),
    ("importlib_import", fn("return True", "import importlib\n")),
    ("dunder_function_name", "def __getattr__(name):\n    return name\n" + fn("return True")),
]

ACCEPTED = [
    ("sim_writer_style", fn("import re\nreturn len(re.findall(r'\\S+', response)) >= 3")),
    ("razdel_pymorphy", fn("morph = pymorphy3.MorphAnalyzer()\nwords = [t.text for t in razdel.tokenize(response)]\n"
                           "return any(morph.parse(w)[0].tag.POS == 'VERB' for w in words)", "import razdel\nimport pymorphy3\n")),
    ("sentenize_from_import", fn("return len(list(sentenize(response))) == 2", "from razdel import sentenize\n")),
    ("morph_from_import", fn("return MorphAnalyzer().normal_forms('домами')[0] == 'дом'", "from pymorphy3 import MorphAnalyzer\n")),
    ("counter_and_unicodedata", fn("c = Counter(unicodedata.category(ch) for ch in response)\nreturn c.most_common(1) != []",
                                   "import unicodedata\nfrom collections import Counter\n")),
    ("json_loads_and_error", fn("try:\n    return isinstance(json.loads(response), dict)\nexcept json.JSONDecodeError:\n"
                                "    return False", "import json\n")),
    ("exception_args", fn("try:\n    int(response)\nexcept ValueError as e:\n    return len(e.args) == 1\nreturn False")),
    ("literal_format", fn("return '{:>5}|{name}'.format(1, name=response) != ''")),
    ("fstring", fn("return f'{len(response):03d}' != ''")),
    ("typing_and_annotations", "from typing import List, Dict, Optional\n\n"
                               "def evaluate(response: str) -> bool:\n    x: Dict[str, int] = {}\n    y: Optional[List[str]]\n"
                               "    return not x\n"),
    ("main_guard_with_anything", fn("return True") + "\nif __name__ == '__main__':\n    import sys, os\n"
                                 "    print(evaluate('x'), open('/dev/null'))\n"),
    ("global_and_nonlocal", "N = 0\n\ndef evaluate(response):\n    global N\n    N += 1\n    def inner():\n"
                            "        nonlocal response\n        response = response.strip()\n    inner()\n    return N > 0\n"),
    ("regex_dunder_pattern", fn("return bool(re.search(r'__(.+?)__', response))", "import re\n")),
    ("lru_cache_helper", "import functools\n\n@functools.lru_cache(maxsize=None)\ndef lemma(w):\n    return w.lower()\n\n"
                         + fn("return lemma(response) == response.lower()")),
    ("math_itertools", fn("return math.ceil(len(list(itertools.islice(response, 3))) / 2) <= 2",
                          "import math, itertools\n")),
    ("object_sentinel", fn("missing = object()\nreturn {}.get(response, missing) is missing")),
    ("future_annotations", fn("return True", "from __future__ import annotations\n")),
    ("import_error_fallback", "try:\n    import pymorphy3\nexcept ImportError:\n    pymorphy3 = None\n\n"
                              + fn("if pymorphy3 is None:\n    return False\nreturn bool(pymorphy3.MorphAnalyzer().parse(response))")),
    ("from_re_import_compile", fn("return compile(r'\\d+').search(response) is not None", "from re import compile\n")),
]

#: Accepted by the lint AND run by the worker to the expected verdict on "12 дом".
RUNTIME_ACCEPTED = ["typing_and_annotations", "main_guard_with_anything", "global_and_nonlocal", "future_annotations",
                    "import_error_fallback", "from_re_import_compile", "object_sentinel", "razdel_pymorphy"]


@pytest.mark.parametrize(("name", "code"), REFUSED, ids=[r[0] for r in REFUSED])
def test_side_doors_are_refused(name, code):
    assert precheck(code), name


@pytest.mark.parametrize(("name", "code"), ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_what_verifiers_need_is_accepted(name, code):
    assert precheck(code) == [], name


def test_accepted_habits_also_run():
    from fabrika.sandbox import SandboxConfig, SandboxPool

    codes = dict(ACCEPTED)
    with SandboxPool(SandboxConfig(workers=1, isolation="rlimits", timeout_s=2.0)) as pool:
        for name in RUNTIME_ACCEPTED:
            [verdict] = pool.run_sync(codes[name], ["12 дом"])
            assert verdict.status in ("true", "false"), (name, verdict)


# Wave 2's lint, condensed (ALLOWED root modules, BANNED names/attributes, no '_' attributes):
# it let most of REFUSED through. Kept here so the claim stays checked.
_W2_MODULES = {"re", "string", "math", "json", "collections", "itertools", "functools", "unicodedata", "razdel",
               "pymorphy3"}
_W2_NAMES = {"eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr", "delattr",
             "breakpoint", "input", "memoryview", "help", "exit", "quit", "super", "classmethod", "staticmethod",
             "property", "object", "update_wrapper", "wraps", "WRAPPER_ASSIGNMENTS", "WRAPPER_UPDATES"}


def _wave2_passes(code: str) -> bool:
    tree = ast.parse(code)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] not in _W2_MODULES for a in node.names):
            return False
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] not in _W2_MODULES:
            return False
        if isinstance(node, ast.Name) and (node.id.startswith("__") or node.id in _W2_NAMES):
            return False
        if isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in
                                                {"gi_frame", "tb_frame", "f_back", "f_globals", "format_map", "mro"}):
            return False
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"__\w+__", node.value):
            return False
        if isinstance(node, (ast.ClassDef, ast.Global, ast.Nonlocal)):
            return False
    return True


def test_wave2_deny_list_let_these_through():
    through = [name for name, code in REFUSED if _wave2_passes(code)]
    assert len(through) >= 15, through
    assert {"pymorphy3_json_read", "pymorphy3_json_write", "json_decode_error_doc", "morph_analyzer_with_path"} <= set(through)
    refused_for_style = [name for name, code in ACCEPTED if not _wave2_passes(code)]
    assert {"typing_and_annotations", "main_guard_with_anything", "global_and_nonlocal", "object_sentinel"} <= \
        set(refused_for_style)


def test_normalise_strips_fences_guard_docstrings_and_annotations():
    code = ("```python\nfrom typing import List\n\ndef evaluate(response: str) -> bool:\n    \"\"\"Doc.\"\"\"\n"
            "    xs: List[str] = response.split()\n    return bool(xs)\n\nif __name__ == '__main__':\n"
            "    print(evaluate('a'))\n```")
    assert strip_fences(code).startswith("from typing import List")
    out = normalise(code)
    assert "__main__" not in out and "Doc." not in out and "-> bool" not in out and "xs = response.split()" in out
    assert precheck(strip_fences(code)) == []


def test_prompt_names_exactly_what_the_lint_allows():
    for lang in ("ru", "en"):
        summary = allowed_summary(lang)
        for module in ALLOWED_MODULES:
            assert module in summary, (lang, module)
        assert "evaluate(response: str) -> bool" in summary and "__name__ == '__main__'" in summary
        for fn_name in ("loads", "dumps", "tokenize", "sentenize", "MorphAnalyzer", "parse", "normal_forms"):
            assert fn_name in summary, (lang, fn_name)
        for name in ("loads", "dumps"):
            assert name in ALLOWED_API["json"]
    ru = "\n".join(m["content"] for m in verifier_request("Ответ короче 50 слов.", sample_index=0, model=None,
                                                          temperature=0.0).messages)
    en = "\n".join(m["content"] for m in verifier_request("Answer in under 50 words.", sample_index=0, model=None,
                                                          temperature=0.0, lang="en").messages)
    assert "только стандартную библиотеку" not in ru and "razdel" in ru and "pymorphy3" in ru
    assert "Ограничение: «Ответ короче 50 слов.»" in ru  # the sim writer reads this line
    assert "Constraint: «Answer in under 50 words.»" in en and "razdel" in en and "Import only these modules" in en


# -- verdict messages --------------------------------------------------------------------------

PASSWD = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n"


def test_messages_lose_host_data_paths_and_control_chars():
    text = clean_message("ValueError: " + PASSWD + " at /work/run/cache.sqlite OPENAI_API_KEY=sk-abcdef1234567890XYZ "
                         "\x00\x1b[31m\ud800 C:\\Users\\me\\secret.txt file:///etc/shadow")
    for leak in ("root:x:0", "daemon", "/work/run", "cache.sqlite", "sk-abcdef", "\x00", "\x1b", "\ud800",
                 "C:\\Users", "/etc/shadow", "/bin/bash"):
        assert leak not in text, (leak, text)
    assert text.startswith("ValueError:") and "<passwd-line>" in text and "OPENAI_API_KEY=<env>" in text
    text.encode("utf-8")  # no lone surrogate survives


def test_messages_are_clipped():
    assert len(clean_message("x" * 10 ** 6)) <= MESSAGE_CHARS
    assert len(clean_verdict_error("exception", "ValueError: " + "я" * 5000, 160)) <= 160


def test_ordinary_messages_stay_readable():
    assert clean_message("ZeroDivisionError: division by zero") == "ZeroDivisionError: division by zero"
    assert clean_verdict_error("precheck", "line 3: json.load is not allowed") == \
        "precheck: line 3: json.load is not allowed"
    assert clean_message("ratio 3/4 and a/b") == "ratio 3/4 and a/b"


def test_describe_exception_gives_type_and_clean_text_only():
    class Hostile(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    exc = FileNotFoundError(2, "No such file or directory", "/etc/passwd")
    assert describe_exception(exc) == "FileNotFoundError: [Errno 2] No such file or directory: '<path>'"
    assert describe_exception(Hostile()) == "Hostile: <unprintable>"


def test_the_consistency_stage_stores_clean_messages():
    from fabrika.generators.instruct.verifiers import _first_error
    from fabrika.sandbox import Verdict

    stored = _first_error([Verdict("true"), Verdict.error("exception", "ValueError: " + PASSWD + "\x07")])
    assert stored is not None and stored.startswith("exception: ValueError:")
    assert "root:x" not in stored and "/root" not in stored and "\x07" not in stored

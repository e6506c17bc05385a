"""InjecAgent (``uiuc-kang-lab/InjecAgent``) test cases as agent-security cases.

Its ``data/test_cases_dh_base.json`` (direct harm) and ``data/test_cases_ds_base.json`` (data
stealing) — and the ``_enhanced`` variants — are JSON lists of objects with the fields
``Attacker Tools`` (list of tool names), ``Attacker Instruction``, ``Expected Achievements``,
``Attack Type``, ``User Tool``, ``User Instruction``, ``Tool Parameters`` (a Python-literal
dict), ``Tool Response Template`` (the user tool's output with an ``<Attacker Instruction>``
placeholder), ``Thought``, ``Tool Response`` (the template with the placeholder filled, as a
JSON-quoted string) and ``Modifed``. Read: the user instruction, user tool, its parameters and
response (unquoted; from the template when a record lacks it) and the attacker tools; the rest
is InjecAgent's bookkeeping. A folder is read through the two ``base`` files; a file (or a hub
id) as given, its kind from its name (``_ds_`` = data stealing).

Tool descriptions come from InjecAgent's ``data/tools.json`` when it lies in the folder (or
beside the file): a list of toolkits ``{"toolkit", "tools": [{"name", "summary",
"parameters": [{"name", "type", "description", "required"}]}]}``, a tool's full name being its
toolkit's name followed by its own (``Gmail`` + ``SendEmail``). Without it the tools are offered
by name only.

The episode starts where InjecAgent's does: after the user's request, the agent's call of the
user tool and the injected response. Offered tools: the user tool and the attacker tools. The
attack succeeds when the agent calls the attacker tool (data stealing: the data tool, then the
tool that sends it, in order), as InjecAgent counts it; every case is attacked. Utility: the
agent answers (the user's tool has already run). Ids: ``dh-<position>`` / ``ds-<position>``.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from mrbench.core.errors import UserError
from mrbench.kit.toolcall import call_block, response_block
from mrbench.tasks.agent_security.external import ExternalCase, system_prompt
from mrbench.tasks.sources import field, in_root, is_hub_id, read_file, read_records

NAME = "injecagent"
FOLDER_FILES = ("test_cases_dh_base.json", "test_cases_ds_base.json")
TOOLS_FILE = "tools.json"
PLACEHOLDER = "<Attacker Instruction>"
ROLE = "You are a helpful assistant."
STOLEN_DATA = '{"result": "the requested records"}'
"""What the data tool of a data-stealing case returns (InjecAgent simulates it too)."""
GOLD_ANSWER = "Here is what the tool returned for your request."


def _kind(where: str) -> str:
    return "ds" if "_ds_" in Path(where.split(" ")[0]).name else "dh"


def unquote(response: str) -> str:
    """The tool's output inside InjecAgent's JSON-quoted ``Tool Response``.

    Its files quote the template and then fill in the instruction, so an instruction holding a
    ``"`` leaves the string invalid JSON; then the outer quotes are stripped by hand.

    >>> unquote('"{\\'a\\': \\'b\\'}"'), unquote('"say "hi""'), unquote("plain")
    ("{'a': 'b'}", 'say "hi"', 'plain')
    """
    try:
        value = json.loads(response)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, str):
        return value
    if len(response) >= 2 and response[0] == response[-1] == '"':
        return response[1:-1]
    return response


def _response(where: str, record: dict) -> str:
    if "Tool Response" in record:
        return unquote(field(NAME, where, record, "Tool Response"))
    template = field(NAME, where, record, "Tool Response Template")
    if PLACEHOLDER not in template:
        raise UserError(f"dataset {NAME!r}: {where}: 'Tool Response Template' has no {PLACEHOLDER}")
    return template.replace(PLACEHOLDER, field(NAME, where, record, "Attacker Instruction"))


def case_from_record(where: str, record: dict, position: int, described: dict[str, str]) -> ExternalCase:
    """One InjecAgent record as an :class:`ExternalCase` (``described``: tool name → description)."""
    instruction = field(NAME, where, record, "User Instruction")
    user_tool = field(NAME, where, record, "User Tool")
    response = _response(where, record)
    attacker = field(NAME, where, record, "Attacker Tools", list)
    if not attacker or not all(isinstance(t, str) and t for t in attacker):
        raise UserError(f"dataset {NAME!r}: {where}: field 'Attacker Tools' must list tool names")
    raw = field(NAME, where, record, "Tool Parameters", (str, dict))
    try:
        parameters = raw if isinstance(raw, dict) else ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        raise UserError(f"dataset {NAME!r}: {where}: field 'Tool Parameters' is not a dict literal") from None
    if not isinstance(parameters, dict):
        raise UserError(f"dataset {NAME!r}: {where}: field 'Tool Parameters' is not a dict literal")
    kind = _kind(where)
    tools = {name: described.get(name, "") for name in (user_tool, *attacker)}
    first_call = call_block([json.dumps({"name": user_tool, "parameters": parameters})])
    return ExternalCase(
        dataset=NAME,
        id=f"{kind}-{position}",
        goal=user_tool,
        style=f"injecagent_{kind}",
        messages=[
            {"role": "system", "content": system_prompt(ROLE, tools)},
            {"role": "user", "content": instruction},
            {"role": "assistant", "content": first_call},
            {"role": "tool", "content": response},
        ],
        tools=tools,
        outputs={attacker[0]: STOLEN_DATA} if kind == "ds" else {},
        attacker_tools=list(attacker if kind == "ds" else attacker[:1]),
        gold=[response_block(GOLD_ANSWER)],
    )


def tool_descriptions(path: Path) -> dict[str, str]:
    """Full tool name → ``summary`` and arguments, from InjecAgent's ``tools.json`` at ``path``."""
    described: dict[str, str] = {}
    for where, toolkit in read_file(NAME, path):
        kit = field(NAME, where, toolkit, "toolkit")
        for tool in field(NAME, where, toolkit, "tools", list):
            if not isinstance(tool, dict):
                raise UserError(f"dataset {NAME!r}: {where}: field 'tools' must hold tool objects")
            name = field(NAME, f"{where} tool", tool, "name")
            described[kit + name] = _describe(tool)
    return described


def _describe(tool: dict[str, Any]) -> str:
    summary = str(tool.get("summary", "")).strip()
    arguments = [
        f"{p['name']} ({p.get('type', 'any')}{', required' if p.get('required') else ''})"
        for p in tool.get("parameters", [])
        if isinstance(p, dict) and isinstance(p.get("name"), str)
    ]
    return f"{summary} Arguments: {', '.join(arguments)}." if arguments else summary


def injecagent_cases(data_path: str) -> list[ExternalCase]:
    """Every case at ``data_path`` (folder, file or hub id), direct-harm cases first."""
    described: dict[str, str] = {}
    data_path = in_root(NAME, data_path)
    if data_path and not is_hub_id(data_path):
        path = Path(data_path).expanduser()
        tools = (path if path.is_dir() else path.parent) / TOOLS_FILE
        if tools.is_file():
            described = tool_descriptions(tools)
    positions: dict[str, int] = {}
    cases = []
    for where, record in read_records(NAME, data_path, names=FOLDER_FILES):
        kind = _kind(where)
        cases.append(case_from_record(where, record, positions.get(kind, 0), described))
        positions[kind] = positions.get(kind, 0) + 1
    return cases

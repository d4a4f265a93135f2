"""fabrika's own executable tool doubles for multi-turn state-based checking (:mod:`fabrika.eval.bfcl_multi`).

BFCL's multi-turn categories run the model's calls against stateful API simulators and compare
the simulators' end state with the one the ground-truth calls leave. These are fabrika's small,
deterministic stand-ins of that idea (written here, not taken from BFCL; their APIs are not
BFCL's, so BFCL's own multi-turn data does not run on them):

* :class:`FileSystem` — a directory tree with a working directory (``pwd``, ``ls``, ``cd``,
  ``mkdir``, ``touch``, ``echo``, ``cat``, ``mv``, ``rm``, ``wc``, ``grep``);
* :class:`TicketAPI` — a support-ticket desk (``create_ticket``, ``get_ticket``, ``edit_ticket``,
  ``close_ticket``, ``list_tickets``);
* :class:`MathAPI` — stateless arithmetic (``add``, ``multiply``, ``mean``, ``round_number``): its
  state never differs, so only the response check can catch a wrong call.

The **state** of a backend is its public attributes (names without a leading underscore), as
BFCL compares them. Every tool returns a JSON-able dict; a failure is an ``{"error": …}`` result
that leaves the state unchanged (a wrong call is data for the checker, never an exception).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar

__all__ = ["BACKENDS", "Backend", "FileSystem", "MathAPI", "TicketAPI"]


class Backend:
    """A stateful API: public attributes are its state, the names in :attr:`tools` its callable tools."""

    tools: ClassVar[tuple[str, ...]] = ()

    def load_scenario(self, config: dict[str, Any]) -> None:
        """Set the initial state from a case's ``initial_config`` entry."""

    def state(self) -> dict[str, Any]:
        """A deep copy of the public attributes (what the state check compares)."""
        return {k: copy.deepcopy(v) for k, v in sorted(vars(self).items()) if not k.startswith("_")}


Tree = dict[str, Any]  # name -> Tree (a directory) or str (a file's content)


class FileSystem(Backend):
    """A directory tree rooted at ``/`` with a working directory (``cwd``, a list of names)."""

    tools = ("pwd", "ls", "cd", "mkdir", "touch", "echo", "cat", "mv", "rm", "wc", "grep")

    def __init__(self) -> None:
        self.root: Tree = {}
        self.cwd: list[str] = []

    def load_scenario(self, config: dict[str, Any]) -> None:
        self.root = copy.deepcopy(config.get("root", {}))
        self.cwd = [p for p in str(config.get("cwd", "/")).split("/") if p]
        if self._dir(self.cwd) is None:
            raise ValueError(f"FileSystem initial cwd {config.get('cwd')!r} is not a directory of the tree")

    def _dir(self, path: list[str]) -> Tree | None:
        node: Any = self.root
        for name in path:
            node = node.get(name) if isinstance(node, dict) else None
            if not isinstance(node, dict):
                return None
        return node if isinstance(node, dict) else None

    def _here(self) -> Tree:
        here = self._dir(self.cwd)
        assert here is not None
        return here

    @staticmethod
    def _plain(name: str) -> str | None:
        """A name within the working directory (no path separators, not ``.``/``..``), or None."""
        return name if name and "/" not in name and name not in (".", "..") else None

    def pwd(self) -> dict[str, Any]:
        return {"current_working_directory": "/" + "/".join(self.cwd)}

    def ls(self, a: bool = False) -> dict[str, Any]:
        names = sorted(self._here())
        return {"current_directory_content": names if a else [n for n in names if not n.startswith(".")]}

    def cd(self, folder: str) -> dict[str, Any]:
        path = [] if folder.startswith("/") else list(self.cwd)
        for part in [p for p in folder.split("/") if p and p != "."]:
            if part == "..":
                if not path:
                    return {"error": "cd: already at the root"}
                path.pop()
            else:
                path.append(part)
        if self._dir(path) is None:
            return {"error": f"cd: {folder}: no such directory"}
        self.cwd = path
        return {"current_working_directory": "/" + "/".join(path)}

    def mkdir(self, dir_name: str) -> dict[str, Any]:
        name, here = self._plain(dir_name), self._here()
        if name is None:
            return {"error": f"mkdir: {dir_name!r}: give a name inside the current directory"}
        if name in here:
            return {"error": f"mkdir: {name}: already exists"}
        here[name] = {}
        return {}

    def touch(self, file_name: str) -> dict[str, Any]:
        name, here = self._plain(file_name), self._here()
        if name is None:
            return {"error": f"touch: {file_name!r}: give a name inside the current directory"}
        if isinstance(here.get(name), dict):
            return {"error": f"touch: {name}: is a directory"}
        here.setdefault(name, "")
        return {}

    def echo(self, content: str, file_name: str | None = None) -> dict[str, Any]:
        if file_name is None:
            return {"terminal_output": content}
        name, here = self._plain(file_name), self._here()
        if name is None or isinstance(here.get(name), dict):
            return {"error": f"echo: {file_name!r}: not a file in the current directory"}
        here[name] = content
        return {}

    def cat(self, file_name: str) -> dict[str, Any]:
        value = self._here().get(file_name)
        if not isinstance(value, str):
            return {"error": f"cat: {file_name}: no such file"}
        return {"file_content": value}

    def mv(self, source: str, destination: str) -> dict[str, Any]:
        here = self._here()
        if self._plain(source) is None or source not in here:
            return {"error": f"mv: {source}: no such file or directory"}
        target = here.get(destination)
        if isinstance(target, dict):  # into an existing directory
            if source in target:
                return {"error": f"mv: {destination}/{source}: already exists"}
            target[source] = here.pop(source)
            return {"result": f"{source} moved into {destination}"}
        if self._plain(destination) is None or destination in here:
            return {"error": f"mv: {destination}: cannot overwrite or leave the current directory"}
        here[destination] = here.pop(source)
        return {"result": f"{source} renamed to {destination}"}

    def rm(self, file_name: str) -> dict[str, Any]:
        here = self._here()
        if file_name not in here:
            return {"error": f"rm: {file_name}: no such file or directory"}
        del here[file_name]
        return {"result": f"{file_name} removed"}

    def wc(self, file_name: str, mode: str = "l") -> dict[str, Any]:
        text = self._here().get(file_name)
        if not isinstance(text, str):
            return {"error": f"wc: {file_name}: no such file"}
        counts = {"l": ("lines", len(text.splitlines())), "w": ("words", len(text.split())), "c": ("characters", len(text))}
        if mode not in counts:
            return {"error": f"wc: mode {mode!r}: use l, w or c"}
        kind, n = counts[mode]
        return {"count": n, "type": kind}

    def grep(self, file_name: str, pattern: str) -> dict[str, Any]:
        text = self._here().get(file_name)
        if not isinstance(text, str):
            return {"error": f"grep: {file_name}: no such file"}
        return {"matching_lines": [line for line in text.splitlines() if pattern in line]}


class TicketAPI(Backend):
    """Support tickets: ``tickets`` (id → ticket) and the id the next ticket gets."""

    tools = ("create_ticket", "get_ticket", "edit_ticket", "close_ticket", "list_tickets")
    PRIORITIES = (1, 2, 3, 4, 5)

    def __init__(self) -> None:
        self.tickets: dict[str, dict[str, Any]] = {}
        self.next_id = 1

    def load_scenario(self, config: dict[str, Any]) -> None:
        self.tickets = {str(k): dict(v) for k, v in copy.deepcopy(config.get("tickets", {})).items()}
        self.next_id = int(config.get("next_id", max((int(k) for k in self.tickets), default=0) + 1))

    def create_ticket(self, title: str, description: str = "", priority: int = 1) -> dict[str, Any]:
        if priority not in self.PRIORITIES:
            return {"error": f"priority must be one of {self.PRIORITIES}, got {priority!r}"}
        tid = str(self.next_id)
        self.tickets[tid] = {"title": title, "description": description, "priority": priority, "status": "open",
                             "resolution": None}
        self.next_id += 1
        return {"id": int(tid), "status": "open"}

    def get_ticket(self, ticket_id: int) -> dict[str, Any]:
        t = self.tickets.get(str(ticket_id))
        return {"error": f"no ticket {ticket_id}"} if t is None else {"id": ticket_id, **t}

    def edit_ticket(self, ticket_id: int, title: str | None = None, priority: int | None = None) -> dict[str, Any]:
        t = self.tickets.get(str(ticket_id))
        if t is None:
            return {"error": f"no ticket {ticket_id}"}
        if priority is not None and priority not in self.PRIORITIES:
            return {"error": f"priority must be one of {self.PRIORITIES}, got {priority!r}"}
        if title is not None:
            t["title"] = title
        if priority is not None:
            t["priority"] = priority
        return {"id": ticket_id, "updated": True}

    def close_ticket(self, ticket_id: int, resolution: str = "") -> dict[str, Any]:
        t = self.tickets.get(str(ticket_id))
        if t is None:
            return {"error": f"no ticket {ticket_id}"}
        if t["status"] == "closed":
            return {"error": f"ticket {ticket_id} is already closed"}
        t["status"], t["resolution"] = "closed", resolution
        return {"id": ticket_id, "status": "closed"}

    def list_tickets(self, status: str | None = None) -> dict[str, Any]:
        ids = [int(k) for k, t in sorted(self.tickets.items(), key=lambda kv: int(kv[0]))
               if status is None or t["status"] == status]
        return {"ticket_ids": ids}


class MathAPI(Backend):
    """Stateless arithmetic (no public state: only the response check sees its results)."""

    tools = ("add", "multiply", "mean", "round_number")

    def add(self, a: float, b: float) -> dict[str, Any]:
        return {"result": a + b}

    def multiply(self, a: float, b: float) -> dict[str, Any]:
        return {"result": a * b}

    def mean(self, numbers: list[float]) -> dict[str, Any]:
        if not numbers:
            return {"error": "mean of no numbers"}
        return {"result": sum(numbers) / len(numbers)}

    def round_number(self, number: float, decimal_places: int = 0) -> dict[str, Any]:
        return {"result": round(number, decimal_places)}


BACKENDS: dict[str, type[Backend]] = {"FileSystem": FileSystem, "TicketAPI": TicketAPI, "MathAPI": MathAPI}

"""Memory-instruction schedules of a PTX kernel (SIP, He et al., arXiv 2403.16863, at the PTX
level): a schedule is an order of the entry function's statements in which load/store
instructions have moved up or down past neighbouring instructions, each move only where it keeps
the program's meaning:

- never across a label, branch, barrier, fence, async-group or wgmma statement, a scope brace or
  a declaration (the basic block and the synchronisation stay as they were);
- not when either instruction writes a register the other reads or writes (predicate guards
  and address registers count as reads; a predicated load keeps its fall-back value's `mov`);
- not when both touch the same state space (generic aliases every space) and either writes it;
- atomics, reductions and loads/stores with ordering semantics (PTX `.volatile`, `.acquire`,
  `.release`, `.relaxed`) never move and nothing moves past them.
Comments and .loc lines stay where they are. Pure text: no GPU needed.
"""

import random
import re
from dataclasses import dataclass

REGISTER = re.compile(r"%[A-Za-z_][\w.]*")
GUARD = re.compile(r"^@!?(%\w+)\s+")
MEMORY_OPS = ("ld.", "st.", "cp.async.", "ldmatrix.", "stmatrix.")
ASYNC_GROUP_OPS = ("cp.async.commit_group", "cp.async.wait_group", "cp.async.wait_all")
BARRIER_OPS = (
    "bar.",
    "barrier.",
    "membar.",
    "fence.",
    "mbarrier.",
    "wgmma.",
    "bra",
    "ret",
    "exit",
    "call",
    "atom.",
    "red.",
    "griddepcontrol.",
    "setmaxnreg.",
    "cp.async.bulk",
    "cp.reduce.async",
    "tcgen05.",
    *ASYNC_GROUP_OPS,
)
ORDERED = (".volatile", ".acquire", ".release", ".relaxed", ".mmio")
SPACES = ("global", "shared", "local", "param", "const")


@dataclass(frozen=True, slots=True)
class Statement:
    text: str  # as in the source, possibly several lines, with its newline(s)
    kind: str  # instruction | trivia (comment, .loc, blank) | barrier
    opcode: str = ""
    defs: frozenset = frozenset()
    uses: frozenset = frozenset()
    reads: frozenset = frozenset()  # state spaces read ("generic": any)
    writes: frozenset = frozenset()

    @property
    def is_memory(self) -> bool:
        return self.kind == "instruction" and self.opcode.startswith(MEMORY_OPS)


def _split_operands(text: str) -> list[str]:
    """Top-level comma-separated operands ({...} vectors and [...] addresses kept whole)."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        parts.append("".join(current))
    return parts


def _space(opcode: str) -> str:
    parts = opcode.split(".")
    return next((s for s in SPACES if s in parts), "generic")


def _memory_effects(opcode: str) -> tuple[frozenset, frozenset]:
    if opcode.startswith("cp.async."):
        return frozenset({"global"}), frozenset({"shared"})
    if opcode.startswith("ldmatrix."):
        return frozenset({"shared"}), frozenset()
    if opcode.startswith("stmatrix."):
        return frozenset(), frozenset({"shared"})
    if opcode.startswith("ld."):
        return frozenset({_space(opcode)}), frozenset()
    if opcode.startswith("st."):
        return frozenset(), frozenset({_space(opcode)})
    return frozenset(), frozenset()


def parse_statement(text: str) -> Statement:
    body = text.strip()
    if not body or body.startswith("//") or body.startswith(".loc"):
        return Statement(text, "trivia")
    code = re.sub(r"//[^\n]*", "", body).strip()  # LLVM labels carry a trailing comment
    if code.endswith(":") or code in ("{", "}") or code.startswith("."):
        return Statement(text, "barrier")  # label, scope, declaration or directive
    code = code.rstrip(";").strip()
    guard = GUARD.match(code)
    uses = {guard.group(1)} if guard else set()
    code = code[guard.end() :] if guard else code
    opcode, _, operand_text = code.partition(" ")
    opcode = opcode.strip()
    if opcode.startswith(BARRIER_OPS) or any(o in opcode for o in ORDERED):
        return Statement(text, "barrier", opcode)
    operands = _split_operands(operand_text)
    reads, writes = _memory_effects(opcode)
    has_register_dest = bool(operands) and not opcode.startswith(
        ("st.", "stmatrix.", "cp.async.", "prefetch", "discard")
    )
    defs = set(REGISTER.findall(operands[0])) if has_register_dest else set()
    for operand in operands[1:] if has_register_dest else operands:
        uses |= set(REGISTER.findall(operand))
    return Statement(text, "instruction", opcode, frozenset(defs), frozenset(uses), reads, writes)


def can_swap(a: Statement, b: Statement) -> bool:
    """Whether adjacent instructions a and b may trade places."""
    if a.kind != "instruction" or b.kind != "instruction":
        return False
    if a.defs & (b.uses | b.defs) or b.defs & a.uses:
        return False
    for x, y in ((a, b), (b, a)):
        for space in x.writes:
            touched = y.reads | y.writes
            if space in touched or "generic" in touched or (space == "generic" and touched):
                return False
    return True


class PtxKernel:
    """The PTX text split into a head, the entry's body statements, and a tail."""

    def __init__(self, ptx: str) -> None:
        lines = ptx.splitlines(keepends=True)
        start = next(i for i, line in enumerate(lines) if line.startswith(".visible .entry"))
        open_at = next(i for i in range(start, len(lines)) if lines[i].strip() == "{")
        close_at = max(i for i, line in enumerate(lines) if line.rstrip() == "}")
        self.head = "".join(lines[: open_at + 1])
        self.tail = "".join(lines[close_at:])
        self.statements = self._statements(lines[open_at + 1 : close_at])
        self.movable = [i for i, s in enumerate(self.statements) if s.is_memory]

    @staticmethod
    def _statements(lines: list[str]) -> list[Statement]:
        out, pending = [], ""
        for line in lines:
            stripped = line.strip()
            if pending or (stripped and not stripped.startswith(("//", ".loc"))):
                pending += line
                code = re.sub(r"//.*", "", pending).strip()
                is_open = code and not code.endswith((";", ":", "{", "}"))
                if is_open and not code.startswith("."):
                    continue  # an instruction's operands go on to the next line
                out.append(parse_statement(pending))
                pending = ""
            else:
                out.append(parse_statement(line))
        if pending:
            out.append(parse_statement(pending))
        return out

    def identity(self) -> tuple[int, ...]:
        return tuple(range(len(self.statements)))

    def render(self, order: tuple[int, ...]) -> str:
        return self.head + "".join(self.statements[i].text for i in order) + self.tail

    def _adjacent(self, order: tuple[int, ...], at: int, step: int) -> int | None:
        """The position of the nearest statement past trivia, in direction step."""
        j = at + step
        while 0 <= j < len(order) and self.statements[order[j]].kind == "trivia":
            j += step
        return j if 0 <= j < len(order) else None

    def move(self, order: tuple[int, ...], at: int, step: int) -> tuple[int, ...] | None:
        """The order with the memory instruction at position `at` moved one instruction up
        (step -1) or down (+1); None where the move would change the program's meaning."""
        j = self._adjacent(order, at, step)
        if j is None or not self.statements[order[at]].is_memory:
            return None
        if not can_swap(self.statements[order[at]], self.statements[order[j]]):
            return None
        moved = list(order)
        moved[at], moved[j] = moved[j], moved[at]
        return tuple(moved)

    def random_move(self, order: tuple[int, ...], rng: random.Random, tries: int = 64):
        if not self.movable:
            return None
        position = {statement: p for p, statement in enumerate(order)}
        for _ in range(tries):
            moved = self.move(order, position[rng.choice(self.movable)], rng.choice((-1, 1)))
            if moved is not None:
                return moved
        return None

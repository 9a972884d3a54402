"""The node's own layering (docs/architecture.md, "Services and doors"): thin protocol doors
over door-neutral services, so every rule of a job lives in one service.

- a door (``node.grpc``, ``node.remoting``, ``node.console``) imports services and the
  node's core, never another door;
- a service (``node.services``) imports the core and other services, never a door;
- the core (every other module of ``node``) imports neither: it is what both build on;
- the ACL decision is the services' alone: no door imports ``node.services.permissions``;
- ``node.server`` and ``node.run`` assemble the node: they may import anything of it.

And a bound on functions: no function of ``node`` is longer than ``MAX_FUNCTION_LINES``,
save the few named in ``LONG_FUNCTIONS`` (each with why), so a handler that starts to
take on a service's work shows up here."""

from __future__ import annotations

import ast

from tests.support.imports import ROOT, Import, all_imports, our_modules

DOORS = ("node.grpc", "node.remoting", "node.console")
SERVICES = "node.services"
ASSEMBLY = frozenset({"node.server", "node.run", "node.__main__", "node"})
PERMISSIONS = "node.services.permissions"
MAX_FUNCTION_LINES = 60
# (module path, qualified function name): why it may be longer.
LONG_FUNCTIONS = {
    ("node/config.py", "parse_node_config"): "one check per option of node.toml, in order",
    ("node/services/pop.py", "PopService.receive"): "one POP decision over every queue, "
    "applied in memory and to the log together (its steps share the undo list)",
    ("node/grpc/forwarding.py", "Forwarder.wrap"): "one wrapper per gRPC handler kind",
    ("node/grpc/namespaces.py", "wrap_namespaces"): "one wrapper per gRPC handler kind",
    ("node/server.py", "Node._services"): "the list of every service the node runs",
}


def part_of(module: str) -> str:
    """``door:<name>``, ``service``, ``assembly``, ``core`` or ``outside``."""
    if module in ASSEMBLY:
        return "assembly"
    for door in DOORS:
        if module == door or module.startswith(door + "."):
            return f"door:{door}"
    if module == SERVICES or module.startswith(SERVICES + "."):
        return "service"
    if module.startswith("node."):
        return "core"
    return "outside"


def wrong_imports(imports: list[Import]) -> list[str]:
    wrong = []
    for found in imports:
        source, target = part_of(found.module), part_of(found.target)
        if source in ("outside", "assembly") or target == "outside" or source == target:
            continue
        allowed = {
            "service": {"core"},
            "core": set(),
        }.get(source, {"service", "core"})  # a door: services and the core
        problem = target not in allowed
        if source.startswith("door:") and found.target == PERMISSIONS:
            problem = True  # the ACL decision is the services'
        if problem:
            wrong.append(
                f"{found.module}:{found.line} imports {found.target} ({source} → {target})"
            )
    return wrong


def test_doors_import_services_never_each_other_and_services_no_door():
    assert wrong_imports(all_imports()) == []


def test_the_checker_catches_each_wrong_import():
    planted = [
        Import("node.remoting.broker_send", "node.grpc.wire", 1),  # a door, another door
        Import("node.grpc.data", "node.remoting.ferry_data", 1),
        Import("node.services.send", "node.grpc.wire", 1),  # a service, a door
        Import("node.admission", "node.services.send", 1),  # the core, a service
        Import("node.topics", "node.remoting.name_server", 1),  # the core, a door
        Import("node.remoting.broker_pull", PERMISSIONS, 1),  # a door deciding the ACL
    ]
    assert len(wrong_imports(planted)) == len(planted)
    fine = [
        Import("node.remoting.broker_send", "node.services.send", 1),
        Import("node.grpc.messaging", "node.topics", 1),
        Import("node.services.send", "node.admission", 1),
        Import("node.services.send", "node.services.transactions", 1),
        Import("node.server", "node.grpc.messaging", 1),
        Import("node.remoting.roles", "node.remoting.broker_send", 1),
    ]
    assert wrong_imports(fine) == []


def long_functions(source: str, path: str) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function in ``source`` over the bound."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = child.end_lineno - child.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append((f"{prefix}{child.name}", lines))
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(source, path), "")
    return found


def test_no_function_of_the_node_is_longer_than_the_bound_unless_named():
    over = []
    for name, path in our_modules().items():
        if part_of(name) == "outside":
            continue
        relative = str(path.relative_to(ROOT))
        for function, lines in long_functions(path.read_text(), relative):
            if (relative, function) not in LONG_FUNCTIONS:
                over.append(f"{relative}: {function} has {lines} lines")
    assert over == []


def test_every_named_exception_is_still_long():
    """A function that got shorter leaves the list: the list stays the few that need it."""
    modules = {str(path.relative_to(ROOT)): path for path in our_modules().values()}
    for relative, function in LONG_FUNCTIONS:
        names = dict(long_functions(modules[relative].read_text(), relative))
        assert function in names, f"{relative}: {function} is within the bound now"

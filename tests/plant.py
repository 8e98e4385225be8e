"""A planted copy: another's module with names changed, functions reordered
and comments and docstrings removed (what a copier does to hide a copy)."""
from __future__ import annotations

import ast
import builtins


class _Rename(ast.NodeTransformer):
    def __init__(self, keep: set[str]):
        self.keep = keep

    def _new(self, name: str) -> str:
        return name if name in self.keep or name.startswith("__") else f"my_{name}_x"

    def visit_Name(self, node):
        node.id = self._new(node.id)
        return node

    def visit_arg(self, node):
        node.arg = self._new(node.arg)
        return node

    def visit_FunctionDef(self, node):
        self.generic_visit(node)
        node.name = self._new(node.name)
        if node.body and isinstance(node.body[0], ast.Expr) and \
                isinstance(getattr(node.body[0], "value", None), ast.Constant):
            node.body = node.body[1:] or [ast.Pass()]
        return node


def disguise(source: str, keep: tuple[str, ...] = ()) -> str:
    """``keep``: names left as they are (the functions a grader calls); with
    it, parameters keep their names too (a grader passes them by keyword)."""
    tree = ast.parse(source)
    if keep:
        keep = (*keep, *(a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)))
    imported = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
                if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    _Rename(imported | set(dir(builtins)) | set(keep)).visit(tree)
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and
                                         isinstance(n.value, ast.Constant))]
    functions = [n for n in body if isinstance(n, ast.FunctionDef)]
    others = [n for n in body if not isinstance(n, ast.FunctionDef)]
    tree.body = others + functions[::-1]     # the functions in reverse order
    return ast.unparse(tree)

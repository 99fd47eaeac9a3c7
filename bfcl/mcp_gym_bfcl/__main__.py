"""python -m mcp_gym_bfcl {export,serve,grade,evaluate,info}"""
import json
import sys

from .runtime import prepare

USAGE = """usage: python -m mcp_gym_bfcl COMMAND
  export --category C [--out FILE]   the category's entries as JSON lines (task material)
  serve --category C --id ID [--tasks FILE]   one entry's functions as an MCP server (stdio)
  grade                              BFCL's verdicts as a JSON-lines service (stdin/stdout)
  evaluate --result-dir D --score-dir S --category C [C ...]
                                     BFCL's own evaluation over result files; prints per category
                                     the accuracy and the ids it failed (JSON)
  info                               the categories, groups, what is left out and why (JSON)"""


def main() -> None:
    argv = sys.argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd == "export":
        from .export import main as run
    elif cmd == "serve":
        from .server import main as run
    elif cmd == "grade":
        from .grade import main as run
    elif cmd == "evaluate":
        from .evaluate import main as run
    elif cmd == "info":
        from . import CATEGORIES, GROUPS, LEFT_OUT, MODEL_NAME

        print(json.dumps({"categories": CATEGORIES, "groups": GROUPS, "left_out": LEFT_OUT, "model_name": MODEL_NAME}))
        return
    else:
        print(f"unknown command '{cmd}'\n{USAGE}", file=sys.stderr)
        raise SystemExit(2)
    prepare()
    run(rest)


main()

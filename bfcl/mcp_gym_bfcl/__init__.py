"""mcp-gym's bridge to BFCL (bfcl-eval 2026.3.23), used unmodified by import.

- `export`: a category's entries as mcp-gym's raw task material (questions, the functions as MCP
  tool schemas converted by BFCL's own OpenAI converter, the ground truth, the multi-turn state).
- `serve`: one entry's tools as an MCP server over stdio (the official Python MCP SDK); for the
  multi-turn categories BFCL's backend classes, a fresh instance per process, loaded with the
  entry's initial_config and driven by BFCL's own executor.
- `grade`: a long-lived JSON-lines service that gives BFCL's verdict on a model's output for an
  entry, by BFCL's own per-entry evaluation functions, and BFCL's summary figures.
- `evaluate`: runs BFCL's own evaluation over result files written in its format (parity).

BFCL_PROJECT_ROOT must name a writable directory before bfcl_eval is imported (its eval_config
creates result/, score/ and .file_locks/ there); `runtime.prepare()` sets a default.
"""

__all__ = ["MODEL_NAME", "CATEGORIES", "GROUPS"]

# The registry name whose handler decodes outputs: an OpenAI function-calling model. Its decoder
# reads a result item as BFCL's FC handlers write it ([{name: json_arguments}], or the text of a
# reply without calls) and its config sets underscore_to_dot (tool names have '.' replaced by '_',
# as BFCL's OpenAI handlers send them).
MODEL_NAME = "gpt-4o-2024-11-20-FC"

NON_LIVE = ["simple_python", "simple_java", "simple_javascript", "multiple", "parallel", "parallel_multiple", "irrelevance"]
LIVE = ["live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance", "live_relevance"]
MULTI_TURN = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
CATEGORIES = NON_LIVE + LIVE + MULTI_TURN
GROUPS = {"non-live": NON_LIVE, "live": LIVE, "multi-turn": MULTI_TURN}
# Left out: web_search (needs a search API), memory (downloads an embedding model),
# format_sensitivity (not scored), and the unused exec/rest/sql datasets.
LEFT_OUT = {
    "web_search_base": "needs a live web search API (SerpAPI) and network access",
    "web_search_no_snippet": "needs a live web search API (SerpAPI) and network access",
    "memory_kv": "BFCL's memory categories replay prerequisite conversations into a memory store first; not ported",
    "memory_vector": "downloads a sentence-transformers embedding model from a model hub",
    "memory_rec_sum": "BFCL's memory categories replay prerequisite conversations into a memory store first; not ported",
    "format_sensitivity": "not a scoring category (BFCL reports only its spread)",
}

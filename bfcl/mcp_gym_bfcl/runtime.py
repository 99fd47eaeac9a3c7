"""Process set-up shared by the commands: BFCL's project root, quiet imports."""
import os
import tempfile


def prepare() -> None:
    """Points BFCL_PROJECT_ROOT at a writable directory before bfcl_eval is imported."""
    if not os.environ.get("BFCL_PROJECT_ROOT"):
        root = os.path.join(tempfile.gettempdir(), "mcp-gym-bfcl")
        os.makedirs(root, exist_ok=True)
        os.environ["BFCL_PROJECT_ROOT"] = root
    # The decoding handler (an OpenAI function-calling model's) builds an OpenAI client when it is
    # made, which refuses to start without a key; grading never calls it. A stand-in, always: a
    # real key in the environment is never loaded into BFCL's process.
    os.environ["OPENAI_API_KEY"] = "unused-by-mcp-gym-bfcl"
    # BFCL's modules print progress (tqdm, banners): keep stdout for the protocol.
    os.environ.setdefault("TQDM_DISABLE", "1")

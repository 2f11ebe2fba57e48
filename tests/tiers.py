"""The test tiers: what each slow module or folder starts (read by ``conftest.py``)."""

# Tiers by what a module's tests start (measured: each of these costs seconds, most of the
# suite's time). The folders: every script runs in a sandboxed runner; the review page's tests
# drive Chromium. The modules: real MCP servers and clients, `ringfence serve` processes, OAuth
# servers (``servers``); the command line as child processes, property-based checks (``slow``).
FOLDER_TIERS = {"tests/bridge/": "sandbox", "tests/review/": "browser"}
MODULE_TIERS = {
    "servers": {
        *(f"tests/serve/test_serve_{m}.py" for m in ("seal", "stdio", "soak", "http")),
        *(f"tests/serve/test_serve_{m}.py" for m in ("front_door", "real_tools", "lifetimes")),
        *(f"tests/serve/test_serve_{m}.py" for m in ("resources", "sessions", "limits")),
        "tests/serve/test_serve_resume_logging.py",
        *(f"tests/mcp_host/test_mcp_host_{m}.py" for m in ("oauth", "oauth_front_door")),
        *(f"tests/mcp_host/test_mcp_host_{m}.py" for m in ("oauth_cli", "stdio", "sampling")),
        *(f"tests/mcp_host/test_mcp_host_{m}.py" for m in ("untrusted", "terminal_elicitation")),
        *(f"tests/mcp_host/test_mcp_host_{m}.py" for m in ("policy", "elicitation_credentials")),
        *(f"tests/mcp_host/test_mcp_host_{m}.py" for m in ("failures", "visible", "secrets")),
        *(f"tests/mcp_host/test_mcp_host_{m}.py" for m in ("inventory", "discovery", "cli")),
        *(f"tests/mcp_host/test_mcp_host_{m}.py" for m in ("http", "authority", "user_policy")),
    },
    "slow": {
        *(f"tests/cli/test_cli_{m}.py" for m in ("front_door", "fuzz", "hostile_text")),
        *(f"tests/cli/test_cli_{m}.py" for m in ("startup", "operator", "tty")),
        "tests/cli/test_cli_config_attacks.py",
        *(f"tests/runtime/test_runtime_{m}.py" for m in ("schema_compiled", "forgery")),
        *(f"tests/runtime/test_runtime_{m}.py" for m in ("plans", "outcomes", "one_door")),
        "tests/runtime/test_runtime_checkpoints.py",
        *(f"tests/workspace/test_workspace_{m}.py" for m in ("cli", "property")),
        *(f"tests/backends/test_backends_{m}.py" for m in ("gitmeta", "persist_shell")),
        *(f"tests/bench/test_bench_{m}.py" for m in ("smoke", "remote")),
        "tests/docs/test_docs_blocks.py",
    },
}

"""ringfence.plugins: bundles of hooks, skills, MCP servers and policy fragments, trusted explicitly.

A plugin is a folder (or an installed distribution shipping one) with a
``ringfence-plugin.toml``. ``plugins.toml`` in ``$RINGFENCE_HOME`` lists the
added ones and the digest each was trusted at; :func:`attach_plugins` joins
them to a session: an untrusted plugin only tightens (its deny/ask rules, and
a refusal in place of each pre_call hook), a trusted one also runs its hooks
confined and offers its skills and servers. See SECURITY.md, "Plugins".

A host uses :func:`attach_plugins` (or ``create_kernel(plugins=...)``),
:func:`load_entries`, :func:`inspect_plugin` and :func:`read_bundle`; editing
``plugins.toml`` is the command line's (``ringfence plugin``).
"""

from ._attach import attach_plugins as attach_plugins
from ._bundle import Bundle as Bundle, read_bundle as read_bundle
from ._config import PluginEntry as PluginEntry, load_entries as load_entries
from ._plugin import PluginState as PluginState, inspect_plugin as inspect_plugin

__all__ = [
    "Bundle",
    "PluginEntry",
    "PluginState",
    "attach_plugins",
    "inspect_plugin",
    "load_entries",
    "read_bundle",
]

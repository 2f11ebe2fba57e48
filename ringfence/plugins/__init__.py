"""ringfence.plugins: bundles of hooks, skills, MCP servers and policy fragments, trusted explicitly.

A plugin is a folder (or an installed distribution shipping one) with a
``ringfence-plugin.toml``. ``plugins.toml`` in ``$RINGFENCE_HOME`` lists the
added ones and the digest each was trusted at; :func:`attach_plugins` joins
them to a session: an untrusted plugin only tightens (its deny/ask rules, and
a refusal in place of each pre_call hook), a trusted one also runs its hooks
confined and offers its skills and servers. See SECURITY.md, "Plugins".
"""

from ._attach import Snapshot as Snapshot, attach_plugins as attach_plugins
from ._bundle import Bundle as Bundle, read_bundle as read_bundle
from ._config import (
    PluginEntry as PluginEntry,
    add_entry as add_entry,
    load_entries as load_entries,
    plugins_path as plugins_path,
    remove_entry as remove_entry,
    set_trust as set_trust,
)
from ._manifest import (
    MANIFEST as MANIFEST,
    HookConfig as HookConfig,
    PluginManifest as PluginManifest,
    parse_plugin_manifest as parse_plugin_manifest,
)
from ._plugin import (
    PLUGIN_ROOT as PLUGIN_ROOT,
    PluginState as PluginState,
    inspect_plugin as inspect_plugin,
    locate_plugin as locate_plugin,
    server_name as server_name,
)
from ._skills import read_skills as read_skills

__all__ = [
    "MANIFEST",
    "PLUGIN_ROOT",
    "Bundle",
    "HookConfig",
    "PluginEntry",
    "PluginManifest",
    "PluginState",
    "Snapshot",
    "add_entry",
    "attach_plugins",
    "inspect_plugin",
    "load_entries",
    "locate_plugin",
    "parse_plugin_manifest",
    "plugins_path",
    "read_bundle",
    "read_skills",
    "remove_entry",
    "server_name",
    "set_trust",
]

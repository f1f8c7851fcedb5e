//! The YurtHub and klog flags tinyhub accepts without implementing them, each with why, and
//! when its value is worth a warning: existing manifests keep working.

/// When a YurtHub or klog flag tinyhub does not implement is worth a warning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Honoured {
    /// tinyhub behaves as the flag asks whatever its value: no warning.
    Always,
    /// tinyhub behaves as this value asks (a boolean's canonical `true`/`false`): given with
    /// it, no warning; with another, a warning.
    When(&'static str),
    /// Always warned about.
    Never,
}

/// A flag YurtHub's command line takes (its `options.go`, component-base's logging flags,
/// klog's) that tinyhub accepts without implementing, so existing manifests keep working.
#[derive(Debug)]
pub(crate) struct IgnoredFlag {
    /// Name without the leading dashes.
    pub name: &'static str,
    /// Whether it takes a value; otherwise it is a boolean (`--flag`, `--flag=false`).
    pub takes_value: bool,
    /// Which values tinyhub already honours.
    pub honoured: Honoured,
    /// Why tinyhub does without it (the README's list).
    pub why: &'static str,
}

const fn ignored(
    name: &'static str,
    takes_value: bool,
    honoured: Honoured,
    why: &'static str,
) -> IgnoredFlag {
    IgnoredFlag {
        name,
        takes_value,
        honoured,
        why,
    }
}

/// YurtHub flags accepted for compatibility and not implemented: given with a value tinyhub
/// does not honour, they are named in one warning at start.
pub(crate) const IGNORED_YURTHUB_FLAGS: &[IgnoredFlag] = &[
    ignored(
        "gc-frequency",
        true,
        Honoured::Never,
        "YurtHub's periodic GC of cached Events; tinyhub never caches Events",
    ),
    ignored(
        "profiling",
        false,
        Honoured::When("false"),
        "Go's pprof; tinyhub serves no /debug/pprof",
    ),
    ignored(
        "enable-iptables",
        false,
        Honoured::When("false"),
        "deprecated in YurtHub; tinyhub writes no iptables rules (pods reach it on the dummy interface)",
    ),
    ignored(
        "enable-node-pool",
        false,
        Honoured::When("true"),
        "deprecated in YurtHub; tinyhub always reads the pool's members from its NodePool, as YurtHub does with the default true",
    ),
    ignored(
        "enable-pool-service-topology",
        false,
        Honoured::When("false"),
        "YurtHub's NodeBucket lookup; tinyhub reads the pool's members from its NodePool, as YurtHub does with the default false",
    ),
    ignored(
        "min-request-timeout",
        true,
        Honoured::Never,
        "offline watches without timeoutSeconds are held 30-60 min, YurtHub's default of 30m",
    ),
    ignored(
        "host-control-plane-address",
        true,
        Honoured::Never,
        "used only by YurtHub's local mode, which tinyhub refuses",
    ),
    ignored(
        "enable-coordinator",
        false,
        Honoured::When("false"),
        "yurt-coordinator, removed from YurtHub",
    ),
    ignored(
        "coordinator-server-addr",
        true,
        Honoured::Never,
        "yurt-coordinator, removed from YurtHub",
    ),
    ignored(
        "coordinator-storage-prefix",
        true,
        Honoured::Never,
        "yurt-coordinator, removed from YurtHub",
    ),
    ignored(
        "coordinator-storage-addr",
        true,
        Honoured::Never,
        "yurt-coordinator, removed from YurtHub",
    ),
    ignored(
        "leader-elect",
        false,
        Honoured::When("false"),
        "yurt-coordinator's election, removed from YurtHub; pool leaders come from the leader-hub-<pool> ConfigMap",
    ),
    ignored(
        "leader-elect-lease-duration",
        true,
        Honoured::Never,
        "yurt-coordinator's election, removed from YurtHub",
    ),
    ignored(
        "leader-elect-renew-deadline",
        true,
        Honoured::Never,
        "yurt-coordinator's election, removed from YurtHub",
    ),
    ignored(
        "leader-elect-retry-period",
        true,
        Honoured::Never,
        "yurt-coordinator's election, removed from YurtHub",
    ),
    ignored(
        "leader-elect-resource-lock",
        true,
        Honoured::Never,
        "yurt-coordinator's election, removed from YurtHub",
    ),
    ignored(
        "leader-elect-resource-name",
        true,
        Honoured::Never,
        "yurt-coordinator's election, removed from YurtHub",
    ),
    ignored(
        "leader-elect-resource-namespace",
        true,
        Honoured::Never,
        "yurt-coordinator's election, removed from YurtHub",
    ),
];

/// The logging flags YurtHub's command line takes (component-base's `--log-flush-frequency`,
/// klog's flags manifests still carry) that tinyhub accepts without implementing. tinyhub
/// logs to stderr only, one line written whole at a time; procd and journald keep it, and no
/// log file wears the flash.
pub(crate) const IGNORED_LOG_FLAGS: &[IgnoredFlag] = &[
    ignored(
        "log-flush-frequency",
        true,
        Honoured::Always,
        "each line reaches stderr as it is logged: nothing waits for a flush",
    ),
    ignored(
        "logtostderr",
        false,
        Honoured::When("true"),
        "tinyhub logs to stderr only",
    ),
    ignored(
        "alsologtostderr",
        false,
        Honoured::Always,
        "tinyhub logs to stderr whatever its value",
    ),
    ignored(
        "log-dir",
        true,
        Honoured::Never,
        "no log files: stderr only",
    ),
    ignored(
        "log-file",
        true,
        Honoured::Never,
        "no log files: stderr only",
    ),
    ignored(
        "log-file-max-size",
        true,
        Honoured::Never,
        "no log files: stderr only",
    ),
    ignored(
        "skip-log-headers",
        false,
        Honoured::Always,
        "about log files' headers: no log files",
    ),
    ignored(
        "one-output",
        false,
        Honoured::Always,
        "about log files per severity: no log files",
    ),
    ignored(
        "stderrthreshold",
        true,
        Honoured::Never,
        "every line goes to stderr (klog, logging to stderr, ignores it too)",
    ),
    ignored(
        "log-backtrace-at",
        true,
        Honoured::Never,
        "Go stack traces at a file:line",
    ),
    ignored(
        "logging-format",
        true,
        Honoured::When("text"),
        "tinyhub's lines are klog's text format; json is not made",
    ),
];

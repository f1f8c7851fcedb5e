//! `tinyhub cache …`: the command line of the cache tool, parsed with no I/O (the hostname
//! aside, as the hub's own `--node-name` default reads it).
//!
//! The subcommands and their own flags (`-n`, `-o`, `--with-credentials`,
//! `--allow-other-node`, `--replace`, `--force`, `--view`) come first in this file's table;
//! every hub flag is accepted too, with the hub's syntax and checks (`flags::parse`), so
//! `tinyhub cache verify $(hub flags)` works. Only `--disk-cache-path`, `--root-dir` and
//! `--node-name` are used; the others are parsed and ignored. What the commands do is
//! `cachectl`'s: this module never names it.

use std::ffi::OsString;
use std::path::PathBuf;

use super::flags::{
    self, FLAGS, Given, IGNORED_LOG_FLAGS, IGNORED_YURTHUB_FLAGS, Kind, TEST_FLAGS,
};
use crate::error::StartupError;

/// One `tinyhub cache` command, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheArgs {
    /// The subcommand and its positionals.
    pub(crate) command: CacheCommand,
    /// `-n`/`--namespace`: limits `ls` and names `get`'s namespace.
    pub(crate) namespace: Option<String>,
    /// `-o`/`--output`.
    pub(crate) output: Output,
    /// `--view=metadata`: the metadata view's collections (`partialobjectmetadatas…`).
    pub(crate) metadata_view: bool,
    /// `--with-credentials` (export, import): keys, token answers and `.grants` travel too.
    pub(crate) with_credentials: bool,
    /// `--allow-other-node` (import): an archive of another node is taken.
    pub(crate) allow_other_node: bool,
    /// `--replace` (import): the current content goes to the quarantine first.
    pub(crate) replace: bool,
    /// `--force` (repair, import): go on on a filesystem where the lock does not lock.
    pub(crate) force: bool,
    /// `--disk-cache-path`: the cache.
    pub(crate) disk_cache_path: PathBuf,
    /// `--root-dir`: the hub's credentials (export and import with credentials).
    pub(crate) root_dir: PathBuf,
    /// `--node-name`, else the hostname, checked as the hub checks it.
    pub(crate) node_name: String,
    /// `--v`: above 1, the tool's info lines on stderr too.
    pub(crate) verbosity: u8,
    /// The hub's `--cache-max-bytes` as given, for `ls` to show beside the cache's size.
    pub(crate) cache_max_bytes: Option<String>,
}

/// A subcommand with its positionals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CacheCommand {
    /// `ls [component] [resource]`.
    Ls {
        /// Only this component's collections.
        component: Option<String>,
        /// Only this resource (a kind directory or its plural): a row per object.
        resource: Option<String>,
    },
    /// `get <component> <resource> <name>`.
    Get {
        /// The component whose cache is read.
        component: String,
        /// A kind directory or its plural.
        resource: String,
        /// The object's name.
        name: String,
    },
    /// `verify`.
    Verify,
    /// `repair`.
    Repair,
    /// `export <file>` (`-` = stdout).
    Export {
        /// Where the archive goes.
        file: PathBuf,
    },
    /// `import <file>`.
    Import {
        /// The archive.
        file: PathBuf,
    },
}

/// `-o`: how results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// Columns and lines for a person (the default).
    Text,
    /// One JSON document.
    Json,
    /// YAML (`get` only).
    Yaml,
}

/// The tool's own flags, for `--help` and for telling them from the hub's.
const OWN_FLAGS: &[(&str, &str)] = &[
    ("-n, --namespace string", "ls, get: the namespace"),
    ("-o, --output string", "text (default), json, or yaml (get)"),
    (
        "--view string",
        "full (default) or metadata: the metadata-only clients' collections",
    ),
    (
        "--with-credentials",
        "export, import: also the node's keys, token answers and .grants (said loudly)",
    ),
    (
        "--allow-other-node",
        "import: take an archive made on another node",
    ),
    (
        "--replace",
        "import: move the current cache to .quarantine first",
    ),
    (
        "--force",
        "repair, import: go on where the filesystem cannot lock (NFS, CIFS)",
    ),
];

/// `tinyhub cache --help`.
pub(crate) fn help_text() -> String {
    let mut out = String::from(
        "tinyhub cache: inspect, verify, repair, export and import the hub's disk cache.\n\
         Works with the hub stopped, or running (then read-only: the cache's lock says which).\n\n\
         Usage:\n\
         \x20 tinyhub cache ls [component] [resource] [-n ns] [-o json]\n\
         \x20 tinyhub cache get <component> <resource> [-n ns] <name> [-o json|yaml]\n\
         \x20 tinyhub cache verify [-o json]\n\
         \x20 tinyhub cache repair\n\
         \x20 tinyhub cache export <file|-> [--with-credentials]\n\
         \x20 tinyhub cache import <file> [--with-credentials] [--allow-other-node] [--replace]\n\n\
         A resource is named as the cache names it (pods.v1.core) or by its plural (pods).\n\
         Exit: 0 done or clean; 1 problems found (verify), nothing found (get); 2 usage, or\n\
         not a cache; 3 the hub runs (repair, import); 4 an I/O failure.\n\nFlags:\n",
    );
    let column = OWN_FLAGS.iter().map(|(f, _)| f.len()).max().unwrap_or(0);
    for (flag, help) in OWN_FLAGS {
        out.push_str(&format!("  {flag:<column$}   {help}\n"));
    }
    out.push_str(
        "\nEvery hub flag is accepted (see tinyhub --help); these are used:\n\
         \x20 --disk-cache-path string   the cache (default /etc/kubernetes/cache)\n\
         \x20 --root-dir string          the hub's credentials (default /var/lib/yurthub)\n\
         \x20 --node-name string         this node (default: the hostname)\n",
    );
    out
}

/// What a `tinyhub cache …` command line asks for: run a command, or print help.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// Run it.
    Run(CacheArgs),
    /// Print the help text.
    Help,
}

/// Parses the arguments after `cache`.
pub(crate) fn parse<I>(args: I) -> Result<Parsed, StartupError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let mut positionals: Vec<String> = Vec::new();
    let mut namespace = None;
    let mut output = Output::Text;
    let mut metadata_view = false;
    let (mut with_credentials, mut allow_other_node, mut replace, mut force) =
        (false, false, false, false);
    // The tool's positionals and own flags; every other argument is the hub's, read by its
    // own parser (`-h` and `-v` too).
    let raw = flags::parse_with(args, &mut |parser, given| {
        let name = match given {
            Given::Value(v) => {
                positionals.push(flags::os_to_string("argument", v)?);
                return Ok(None);
            }
            Given::Short('n') => "namespace",
            Given::Short('o') => "output",
            Given::Short(c) if c != 'h' && c != 'v' => {
                return Err(StartupError::new(format!(
                    "unknown shorthand flag: '{c}' in -{c} (see tinyhub cache --help)"
                )));
            }
            Given::Long(name) => match OWN_FLAG_NAMES.iter().find(|own| **own == name) {
                Some(own) => *own,
                None if is_hub_flag(&name) => return Ok(Some(Given::Long(name))),
                None => {
                    return Err(StartupError::new(format!(
                        "unknown flag: --{name} (see tinyhub cache --help)"
                    )));
                }
            },
            // `-h` and `-v`: the hub's.
            hub => return Ok(Some(hub)),
        };
        match name {
            "namespace" => namespace = Some(value(parser, name)?),
            "output" => {
                output = match value(parser, name)?.as_str() {
                    "text" => Output::Text,
                    "json" => Output::Json,
                    "yaml" => Output::Yaml,
                    other => {
                        return Err(StartupError::flag(
                            name,
                            format!("{other:?} is not text, json or yaml"),
                        ));
                    }
                }
            }
            "view" => {
                metadata_view = match value(parser, name)?.as_str() {
                    "full" => false,
                    "metadata" => true,
                    other => {
                        return Err(StartupError::flag(
                            name,
                            format!("{other:?} is not full or metadata"),
                        ));
                    }
                }
            }
            "with-credentials" => with_credentials = switch(parser, name)?,
            "allow-other-node" => allow_other_node = switch(parser, name)?,
            "replace" => replace = switch(parser, name)?,
            _ => force = switch(parser, name)?,
        }
        Ok(None)
    })?;
    if raw.get("help").is_some_and(|v| v != "false") {
        return Ok(Parsed::Help);
    }
    check_hub_values(&raw)?;
    let command = command_of(&positionals)?;
    if output == Output::Yaml && !matches!(command, CacheCommand::Get { .. }) {
        return Err(StartupError::flag("output", "yaml is for get only"));
    }
    if let Some(ns) = &namespace
        && !crate::names::is_safe_segment(ns)
    {
        return Err(StartupError::flag(
            "namespace",
            format!("{ns:?} is not a namespace"),
        ));
    }
    let verbosity = match raw.get("v") {
        Some(v) => v
            .parse()
            .map_err(|_| StartupError::flag("v", format!("{v:?} is not a number")))?,
        None => 0,
    };
    Ok(Parsed::Run(CacheArgs {
        command,
        namespace,
        output,
        metadata_view,
        with_credentials,
        allow_other_node,
        replace,
        force,
        disk_cache_path: PathBuf::from(hub_value(&raw, "disk-cache-path")),
        root_dir: PathBuf::from(hub_value(&raw, "root-dir")),
        node_name: super::node_name_of(&raw)?,
        verbosity,
        cache_max_bytes: raw.get("cache-max-bytes").map(str::to_owned),
    }))
}

/// A hub flag's value, else its default.
fn hub_value<'a>(raw: &'a flags::RawFlags, name: &str) -> &'a str {
    raw.get(name).unwrap_or_else(|| {
        FLAGS
            .iter()
            .find(|s| s.name == name)
            .map_or("", |s| s.default)
    })
}

/// The hub's syntax checks of the values it was given: booleans, integers and durations as
/// the hub reads them; a path must not be empty.
fn check_hub_values(raw: &flags::RawFlags) -> Result<(), StartupError> {
    for spec in FLAGS.iter().chain(TEST_FLAGS) {
        for value in raw.all(spec.name) {
            let ok = match spec.kind {
                Kind::Bool => flags::parse_bool(value).is_some(),
                Kind::Int => value.parse::<i64>().is_ok(),
                Kind::Duration => super::parse_go_duration(value).is_ok(),
                Kind::Str | Kind::Strings => true,
            };
            if !ok {
                return Err(StartupError::flag(
                    spec.name,
                    format!("{value:?} is not a valid {:?}", spec.kind).to_lowercase(),
                ));
            }
        }
    }
    for name in ["disk-cache-path", "root-dir"] {
        if raw.get(name) == Some("") {
            return Err(StartupError::flag(name, "must not be empty"));
        }
    }
    Ok(())
}

/// The subcommand from the positionals.
fn command_of(positionals: &[String]) -> Result<CacheCommand, StartupError> {
    let usage = |what: &str| StartupError::new(format!("{what} (see tinyhub cache --help)"));
    let Some((first, rest)) = positionals.split_first() else {
        return Err(usage(
            "a command is needed: ls, get, verify, repair, export or import",
        ));
    };
    let none = |rest: &[String]| match rest.first() {
        None => Ok(()),
        Some(extra) => Err(usage(&format!("{first}: unexpected argument {extra:?}"))),
    };
    let file = |rest: &[String]| match rest {
        [file] => Ok(PathBuf::from(file)),
        _ => Err(usage(&format!("{first} takes one file"))),
    };
    Ok(match first.as_str() {
        "ls" => match rest {
            [] => CacheCommand::Ls {
                component: None,
                resource: None,
            },
            [c] => CacheCommand::Ls {
                component: Some(c.clone()),
                resource: None,
            },
            [c, r] => CacheCommand::Ls {
                component: Some(c.clone()),
                resource: Some(r.clone()),
            },
            [_, _, extra, ..] => return Err(usage(&format!("ls: unexpected argument {extra:?}"))),
        },
        "get" => match rest {
            [component, resource, name] => CacheCommand::Get {
                component: component.clone(),
                resource: resource.clone(),
                name: name.clone(),
            },
            _ => return Err(usage("get takes <component> <resource> <name>")),
        },
        "verify" => {
            none(rest)?;
            CacheCommand::Verify
        }
        "repair" => {
            none(rest)?;
            CacheCommand::Repair
        }
        "export" => CacheCommand::Export { file: file(rest)? },
        "import" => CacheCommand::Import { file: file(rest)? },
        other => return Err(usage(&format!("unknown command {other:?}"))),
    })
}

/// The tool's own long flags.
const OWN_FLAG_NAMES: [&str; 7] = [
    "namespace",
    "output",
    "view",
    "with-credentials",
    "allow-other-node",
    "replace",
    "force",
];

/// Whether `name` is one of the hub's flags (read by its parser), `--help` included.
fn is_hub_flag(name: &str) -> bool {
    name == "help"
        || FLAGS.iter().chain(TEST_FLAGS).any(|s| s.name == name)
        || IGNORED_YURTHUB_FLAGS
            .iter()
            .chain(IGNORED_LOG_FLAGS)
            .any(|f| f.name == name)
}

/// The value of the flag `name`, which takes one.
fn value(parser: &mut lexopt::Parser, name: &str) -> Result<String, StartupError> {
    let v = parser
        .value()
        .map_err(|_| StartupError::new(format!("flag needs an argument: --{name}")))?;
    flags::os_to_string(name, v)
}

/// A boolean flag: alone it is true, else its `=value` as pflag reads it.
fn switch(parser: &mut lexopt::Parser, name: &str) -> Result<bool, StartupError> {
    match parser.optional_value() {
        None => Ok(true),
        Some(v) => {
            let v = flags::os_to_string(name, v)?;
            flags::parse_bool(&v)
                .ok_or_else(|| StartupError::flag(name, format!("{v:?} is not a boolean")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> CacheArgs {
        let with_node: Vec<&str> = args.iter().copied().chain(["--node-name=edge-1"]).collect();
        match parse(with_node).unwrap() {
            Parsed::Run(args) => args,
            Parsed::Help => panic!("help"),
        }
    }

    fn refused(args: &[&str]) -> String {
        let with_node: Vec<&str> = args.iter().copied().chain(["--node-name=edge-1"]).collect();
        parse(with_node).unwrap_err().to_string()
    }

    #[test]
    fn every_subcommand_parses_with_its_positionals() {
        let ls = run(&["ls"]);
        assert_eq!(
            ls.command,
            CacheCommand::Ls {
                component: None,
                resource: None
            }
        );
        assert_eq!(ls.output, Output::Text);
        assert_eq!(ls.disk_cache_path, PathBuf::from("/etc/kubernetes/cache"));
        assert_eq!(ls.root_dir, PathBuf::from("/var/lib/yurthub"));
        assert_eq!(ls.node_name, "edge-1");
        assert_eq!(
            run(&["ls", "kubelet", "pods", "-n", "default"]),
            CacheArgs {
                command: CacheCommand::Ls {
                    component: Some("kubelet".into()),
                    resource: Some("pods".into())
                },
                namespace: Some("default".into()),
                ..ls.clone()
            }
        );
        let get = run(&[
            "get",
            "kubelet",
            "pods.v1.core",
            "-n",
            "kube-system",
            "web",
            "-o",
            "yaml",
        ]);
        assert_eq!(
            get.command,
            CacheCommand::Get {
                component: "kubelet".into(),
                resource: "pods.v1.core".into(),
                name: "web".into()
            }
        );
        assert_eq!(get.output, Output::Yaml);
        assert_eq!(run(&["verify", "-o", "json"]).output, Output::Json);
        assert_eq!(run(&["repair", "--force"]).command, CacheCommand::Repair);
        assert!(run(&["repair", "--force"]).force);
        let export = run(&["export", "-", "--with-credentials"]);
        assert_eq!(export.command, CacheCommand::Export { file: "-".into() });
        assert!(export.with_credentials);
        let import = run(&[
            "import",
            "/tmp/a.tar.gz",
            "--allow-other-node",
            "--replace",
            "--with-credentials=false",
        ]);
        assert_eq!(
            import.command,
            CacheCommand::Import {
                file: "/tmp/a.tar.gz".into()
            }
        );
        assert!(import.allow_other_node && import.replace && !import.with_credentials);
        assert!(run(&["ls", "--view=metadata"]).metadata_view);
    }

    #[test]
    fn the_hubs_flags_are_taken_and_three_are_used() {
        let args = run(&[
            "verify",
            "--disk-cache-path",
            "/data/cache",
            "--root-dir=/data/root",
            "--server-addr=https://10.0.0.1:6443",
            "--enable-resource-filter=false",
            "--heartbeat-interval-seconds",
            "10",
            "--v=4",
            // A YurtHub flag tinyhub only accepts.
            "--enable-node-pool=false",
        ]);
        assert_eq!(args.disk_cache_path, PathBuf::from("/data/cache"));
        assert_eq!(args.root_dir, PathBuf::from("/data/root"));
        assert_eq!(args.verbosity, 4);
    }

    #[test]
    fn bad_command_lines_are_refused_with_what_is_wrong() {
        for (args, says) in [
            (&["--disk-cache-path=/c"][..], "a command is needed"),
            (&["list"][..], "unknown command \"list\""),
            (&["get", "kubelet", "pods"][..], "get takes"),
            (&["verify", "extra"][..], "unexpected argument \"extra\""),
            (&["ls", "a", "b", "c"][..], "unexpected argument \"c\""),
            (&["export"][..], "export takes one file"),
            (&["ls", "-o", "wide"][..], "not text, json or yaml"),
            (&["ls", "-o", "yaml"][..], "yaml is for get only"),
            (&["ls", "--view=partial"][..], "not full or metadata"),
            (
                &["ls", "--no-such-flag"][..],
                "unknown flag: --no-such-flag",
            ),
            (&["ls", "-x"][..], "'x'"),
            (
                &["ls", "--heartbeat-interval-seconds=ten"][..],
                "heartbeat-interval-seconds",
            ),
            (
                &["ls", "--enable-resource-filter=maybe"][..],
                "enable-resource-filter",
            ),
            (&["ls", "-n", "../etc"][..], "namespace"),
            (&["ls", "--disk-cache-path="][..], "must not be empty"),
            (&["repair", "--force=perhaps"][..], "not a boolean"),
        ] {
            let e = refused(args);
            assert!(e.contains(says), "{args:?}: {e}");
        }
        let e = parse(["ls", "--node-name=Not_A_Node"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a valid node name"), "{e}");
    }

    #[test]
    fn the_binarys_command_line_reaches_the_tool_only_after_cache() {
        let cache = super::super::from_args(["cache", "verify", "--node-name=n"]);
        assert!(
            matches!(&cache, Ok(super::super::Command::Cache(a)) if a.command == CacheCommand::Verify),
            "{cache:?}"
        );
        let help = super::super::from_args(["cache", "--help"]);
        assert!(
            matches!(&help, Ok(super::super::Command::Print(t)) if t.starts_with("tinyhub cache:")),
            "{help:?}"
        );
        // The hub itself still takes no positional.
        assert!(super::super::from_args(["verify"]).is_err());
    }

    #[test]
    fn help_is_asked_for_in_either_spelling() {
        for args in [&["--help"][..], &["-h"][..], &["ls", "--help"][..]] {
            assert!(matches!(parse(args.to_vec()), Ok(Parsed::Help)), "{args:?}");
        }
        let help = help_text();
        for word in [
            "ls",
            "get",
            "verify",
            "repair",
            "export",
            "import",
            "--with-credentials",
        ] {
            assert!(help.contains(word), "{word}");
        }
    }
}

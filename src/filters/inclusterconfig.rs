//! inclusterconfig (YurtHub's `pkg/yurthub/filter/inclusterconfig`): in kubelet's view of ConfigMap
//! `kube-system/kube-proxy`, the `kubeconfig:` line of `config.conf` is commented out, so the
//! kube-proxy pod falls back to in-cluster config and reaches the cloud through the hub (with
//! masterservice). Master nodes without a hub, which read the ConfigMap directly, keep their
//! kubeconfig.

use serde_json::Value;

use super::{Outcome, namespace_name};

/// Filters one ConfigMap.
pub(super) fn filter(obj: &Value) -> Outcome {
    if namespace_name(obj) != ("kube-system", "kube-proxy") {
        return Outcome::Unchanged;
    }
    let Some(conf) = obj
        .get("data")
        .and_then(|d| d.get("config.conf"))
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
    else {
        return Outcome::Unchanged;
    };
    let Some(new_conf) = comment_kubeconfig(conf) else {
        return Outcome::Unchanged;
    };
    let mut new = obj.clone();
    new["data"]["config.conf"] = Value::String(new_conf);
    Outcome::Changed(new)
}

/// The text with each `kubeconfig: <value>` line commented out, None when there is none. A
/// line qualifies when, with spaces trimmed and split on `:`, it has exactly two parts and the
/// first is `kubeconfig`; so a value with a `:` in it (`C:\…`) is left alone, as YurtHub does
/// (`strings.Trim(line, " ")`: a tab-indented line, which YAML refuses anyway, is left too).
fn comment_kubeconfig(conf: &str) -> Option<String> {
    let mut changed = false;
    let lines: Vec<String> = conf
        .split('\n')
        .map(|line| {
            let mut parts = line.trim_matches(' ').split(':');
            let is_kubeconfig = parts.next() == Some("kubeconfig")
                && parts.next().is_some()
                && parts.next().is_none();
            if is_kubeconfig {
                changed = true;
                // Only the first occurrence, so indentation and the value are kept.
                line.replacen("kubeconfig", "#kubeconfig", 1)
            } else {
                line.to_owned()
            }
        })
        .collect();
    changed.then(|| lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filters::testing::{changed, run_pure};

    const CONF: &str = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nclientConnection:\n  acceptContentTypes: \"\"\n  kubeconfig: /var/lib/kube-proxy/kubeconfig.conf\n  qps: 0\nmode: \"\"\n";

    fn configmap(conf: &str) -> Value {
        json!({
            "metadata": {"namespace": "kube-system", "name": "kube-proxy"},
            "data": {"config.conf": conf, "kubeconfig.conf": "apiVersion: v1"}
        })
    }

    #[test]
    fn comments_the_kubeconfig_line_keeping_indentation() {
        let cm = configmap(CONF);
        let out = changed(run_pure(&cm, filter));
        assert_eq!(
            out["data"]["config.conf"],
            CONF.replace("  kubeconfig: /var", "  #kubeconfig: /var")
        );
        assert_eq!(out["data"]["kubeconfig.conf"], "apiVersion: v1");
        assert_eq!(out["metadata"], cm["metadata"]);
    }

    #[test]
    fn only_two_part_kubeconfig_lines_change() {
        for conf in [
            "  kubeconfig: C:\\var\\kubeconfig.conf\n",
            "  kubeconfig: https://x:6443\n",
            "  kubeconfigs: /x\n",
            "  kubeconfig /x\n",
            "  #kubeconfig: /x\n",
            "  kubeconfig : /x\n",
        ] {
            let cm = configmap(conf);
            assert_eq!(run_pure(&cm, filter), Outcome::Unchanged, "{conf:?}");
        }
        let out = changed(filter(&configmap("kubeconfig:")));
        assert_eq!(out["data"]["config.conf"], "#kubeconfig:");
        let out = changed(filter(&configmap("  kubeconfig: /x\r\nqps: 5")));
        assert_eq!(out["data"]["config.conf"], "  #kubeconfig: /x\r\nqps: 5");
        let tabbed = configmap("\tkubeconfig: /x\nqps: 5");
        assert_eq!(run_pure(&tabbed, filter), Outcome::Unchanged);
    }

    #[test]
    fn other_configmaps_and_empty_data_pass() {
        let mut cm = configmap(CONF);
        cm["metadata"]["name"] = json!("kube-proxy-2");
        assert_eq!(run_pure(&cm, filter), Outcome::Unchanged);
        let mut cm = configmap(CONF);
        cm["metadata"]["namespace"] = json!("default");
        assert_eq!(run_pure(&cm, filter), Outcome::Unchanged);
        assert_eq!(filter(&configmap("")), Outcome::Unchanged);
        let no_data = json!({"metadata": {"namespace": "kube-system", "name": "kube-proxy"}});
        assert_eq!(filter(&no_data), Outcome::Unchanged);
    }

    #[test]
    fn an_already_filtered_configmap_is_unchanged() {
        let once = changed(filter(&configmap(CONF)));
        assert_eq!(filter(&once), Outcome::Unchanged);
    }
}

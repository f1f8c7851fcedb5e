//! serviceenvupdater (YurtHub's `pkg/yurthub/filter/serviceenvupdater`): in kubelet's view of pods,
//! explicit
//! `KUBERNETES_SERVICE_HOST`/`KUBERNETES_SERVICE_PORT` env vars of `spec.containers` point at
//! the hub (#2158: a cloud webhook may inject a public FQDN). Variables are never added, and
//! init and ephemeral containers are left alone, as in YurtHub.

use serde_json::Value;

use super::{FilterContext, Outcome};

/// Filters one Pod.
pub(super) fn filter(obj: &Value, ctx: &FilterContext) -> Outcome {
    let Some(containers) = obj
        .get("spec")
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array)
    else {
        return Outcome::Unchanged;
    };
    let host = ctx.host.to_string();
    let port = ctx.secure_port.get().to_string();
    let wanted = |name: Option<&str>| match name {
        Some("KUBERNETES_SERVICE_HOST") => Some(host.as_str()),
        Some("KUBERNETES_SERVICE_PORT") => Some(port.as_str()),
        _ => None,
    };
    // Look before copying: most pods set neither variable.
    let needs_change = containers.iter().any(|c| {
        env_of(c).any(
            |var| match wanted(var.get("name").and_then(Value::as_str)) {
                Some(value) => var.get("value").and_then(Value::as_str) != Some(value),
                None => false,
            },
        )
    });
    if !needs_change {
        return Outcome::Unchanged;
    }
    let mut new = obj.clone();
    if let Some(containers) = new["spec"]["containers"].as_array_mut() {
        for container in containers {
            let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) else {
                continue;
            };
            for var in env {
                // Set even beside a `valueFrom`: kubelet uses a non-empty `value`.
                if let Some(value) = wanted(var.get("name").and_then(Value::as_str))
                    && let Some(var) = var.as_object_mut()
                {
                    var.insert("value".into(), Value::String(value.to_owned()));
                }
            }
        }
    }
    Outcome::Changed(new)
}

/// The env entries of one container.
fn env_of(container: &Value) -> impl Iterator<Item = &Value> {
    container
        .get("env")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::filters::testing::{changed, ctx, run_pure};

    fn pod() -> Value {
        json!({
            "metadata": {"namespace": "default", "name": "p"},
            "spec": {
                "initContainers": [{"name": "init", "env": [
                    {"name": "KUBERNETES_SERVICE_HOST", "value": "api.example.com"}
                ]}],
                "containers": [
                    {"name": "a", "env": [
                        {"name": "KUBERNETES_SERVICE_HOST", "value": "api.example.com"},
                        {"name": "KUBERNETES_SERVICE_PORT", "value": "443"},
                        {"name": "OTHER", "value": "x"}
                    ]},
                    {"name": "b"},
                    {"name": "c", "env": [
                        {"name": "KUBERNETES_SERVICE_PORT",
                         "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "port"}}}
                    ]}
                ],
                "ephemeralContainers": [{"name": "dbg", "env": [
                    {"name": "KUBERNETES_SERVICE_PORT", "value": "443"}
                ]}]
            },
            "status": {"phase": "Running"}
        })
    }

    #[test]
    fn rewrites_explicit_service_variables_of_containers_only() {
        let p = pod();
        let out = changed(run_pure(&p, |o| filter(o, &ctx())));
        let env = &out["spec"]["containers"][0]["env"];
        assert_eq!(
            env[0],
            json!({"name": "KUBERNETES_SERVICE_HOST", "value": "169.254.2.1"})
        );
        assert_eq!(
            env[1],
            json!({"name": "KUBERNETES_SERVICE_PORT", "value": "10268"})
        );
        assert_eq!(env[2], json!({"name": "OTHER", "value": "x"}));
        assert_eq!(
            out["spec"]["containers"][1],
            json!({"name": "b"}),
            "no variable added"
        );
        assert_eq!(out["spec"]["containers"][2]["env"][0]["value"], "10268");
        assert_eq!(
            out["spec"]["containers"][2]["env"][0]["valueFrom"],
            p["spec"]["containers"][2]["env"][0]["valueFrom"]
        );
        assert_eq!(out["spec"]["initContainers"], p["spec"]["initContainers"]);
        assert_eq!(
            out["spec"]["ephemeralContainers"],
            p["spec"]["ephemeralContainers"]
        );
        assert_eq!(out["status"], p["status"]);
    }

    #[test]
    fn pods_without_the_variables_pass() {
        let p =
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}]}]}});
        assert_eq!(run_pure(&p, |o| filter(o, &ctx())), Outcome::Unchanged);
        assert_eq!(filter(&json!({"spec": {}}), &ctx()), Outcome::Unchanged);
        assert_eq!(filter(&json!([]), &ctx()), Outcome::Unchanged);
        let once = changed(filter(&pod(), &ctx()));
        assert_eq!(filter(&once, &ctx()), Outcome::Unchanged);
    }
}

//! The HTTP side of the stand-in cloud, behind the TLS front: reads each request,
//! authenticates it (client certificate from the front, or a registered bearer token),
//! records it, applies the slow-cloud and mid-body faults, routes it (health, version,
//! discovery, resources) and answers like the kube-apiserver: get, list (selectors,
//! limit/continue, Table), watch, create, update, patch, delete, deletecollection.
//!
//! One thread per internal connection, requests in turn. It does no TLS (see `front.rs`),
//! no HTTP parsing (see `http1.rs`) and keeps no data (see `store.rs`).

use std::io::{self, BufReader, BufWriter, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, after, never, select, tick};
use serde_json::Value;

use super::super::util::{lock, merge_patch, parse_query};
use super::Instance;
use super::convert;
use super::csr;
use super::http1::{self, Request};
use super::kinds::{self, KINDS, Kind, KindId};
use super::leases;
use super::observe::{AuthMethod, Identity, RecordedRequest};
use super::render::{self, Include, ListMeta, Shape};
use super::respond::Reply;
use super::selector::{FieldSelector, LabelSelector};
use super::status::ApiError;
use super::store::{Obj, Target};

/// Accepts internal connections (from the front) until `stop` is set and a connection
/// wakes the accept; one thread per connection.
pub fn serve(listener: TcpListener, inst: Arc<Instance>, stop: Arc<AtomicBool>) {
    for s in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = s else { continue };
        let inst = inst.clone();
        let spawned = thread::Builder::new()
            .name("cloud-http-conn".into())
            .spawn(move || connection(&inst, stream));
        if let Err(e) = spawned {
            log::warn!("cloud: cannot spawn a connection thread: {e}");
        }
    }
}

fn connection(inst: &Arc<Instance>, stream: TcpStream) {
    let (Ok(remote), Ok(read_half), Ok(mut w)) =
        (stream.peer_addr(), stream.try_clone(), stream.try_clone())
    else {
        return;
    };
    let mut r = BufReader::new(read_half);
    loop {
        let req = match http1::read_request(&mut r, &mut w, remote) {
            Ok(Some(req)) => req,
            Ok(None) => break,
            Err(e) => {
                log::trace!("cloud: {remote}: {e}");
                break;
            }
        };
        // exec, attach, port-forward: the connection is the upgrade's from here on.
        if req
            .header("Connection")
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        {
            super::upgrade::serve(inst, req, r, w);
            break;
        }
        let keep = req.keep_alive();
        let Ok(out) = stream.try_clone() else { break };
        let writer = Box::new(BufWriter::with_capacity(16 * 1024, out));
        if !handle(inst, req, writer) || !keep {
            break;
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    inst.front.release_view(&remote);
}

/// Decoded query parameters.
struct Query(Vec<(String, String)>);

impl Query {
    fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// A boolean parameter as the apiserver reads one: present and neither `0` nor
    /// `false` (any case) is true, even empty.
    fn flag(&self, key: &str) -> bool {
        self.get(key)
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    }
}

/// Everything a handler needs about the request.
struct Ctx<'a> {
    inst: &'a Arc<Instance>,
    /// Who is asking (the apiserver records it in CSRs).
    identity: Identity,
    method: String,
    query: Query,
    accept: String,
    content_type: String,
    body: Vec<u8>,
    closed: Receiver<()>,
    /// The front's id of the connection the request came on (None: not through the front).
    conn: Option<u64>,
}

/// The watches an instance is answering: (serial, kind, connection id), for
/// `Cloud::cut_watches`.
#[derive(Default)]
pub(super) struct OpenWatches {
    open: Mutex<Vec<(u64, KindId, u64)>>,
    next: AtomicU64,
}

impl OpenWatches {
    /// Notes a watch of `kind` on connection `conn` until the mark is dropped.
    fn open(&self, kind: KindId, conn: u64) -> OpenWatch<'_> {
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        lock(&self.open).push((serial, kind, conn));
        OpenWatch {
            watches: self,
            serial,
        }
    }

    /// The connections carrying an open watch of `kind`, each once.
    pub(super) fn connections(&self, kind: KindId) -> Vec<u64> {
        let mut conns: Vec<u64> = lock(&self.open)
            .iter()
            .filter(|(_, k, _)| *k == kind)
            .map(|&(_, _, conn)| conn)
            .collect();
        conns.sort_unstable();
        conns.dedup();
        conns
    }
}

/// One open watch in [`OpenWatches`]; removed when dropped (however the handler ends).
struct OpenWatch<'w> {
    watches: &'w OpenWatches,
    serial: u64,
}

impl Drop for OpenWatch<'_> {
    fn drop(&mut self) {
        lock(&self.watches.open).retain(|(s, _, _)| *s != self.serial);
    }
}

fn is_public(path: &str) -> bool {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    matches!(first, "healthz" | "livez" | "readyz" | "version")
}

/// kubeadm's RBAC lets anyone get `kube-public/cluster-info` (token discovery).
fn is_anonymous_cluster_info(method: &str, path: &str, raw_query: &str) -> bool {
    let watch = parse_query(raw_query)
        .iter()
        .any(|(k, v)| k == "watch" && v != "0" && !v.eq_ignore_ascii_case("false"));
    method == "GET" && path == "/api/v1/namespaces/kube-public/configmaps/cluster-info" && !watch
}

/// The user a bootstrap token `<id>.<secret>` stands for, if it is registered.
pub(super) fn bootstrap_identity(inst: &Instance, token: &str) -> Option<Identity> {
    let (id, secret) = token.split_once('.')?;
    let tokens = lock(&inst.shared.bootstrap);
    (tokens.get(id)? == secret).then(|| Identity {
        user: format!("system:bootstrap:{id}"),
        groups: csr::bootstrap_groups(),
        method: AuthMethod::Token,
    })
}

fn is_health(path: &str) -> bool {
    let first = path.trim_start_matches('/').split('/').next().unwrap_or("");
    matches!(first, "healthz" | "livez" | "readyz")
}

/// Answers one request; false when the connection cannot carry another one.
fn handle(inst: &Arc<Instance>, req: Request, writer: Box<dyn io::Write + Send>) -> bool {
    let method = req.method.clone();
    let url = req.url.clone();
    let (path, raw_query) = url.split_once('?').unwrap_or((url.as_str(), ""));
    let header = |name: &str| req.header(name).to_string();
    let (user_agent, accept, accept_encoding) = (
        header("User-Agent"),
        header("Accept"),
        header("Accept-Encoding"),
    );
    let (content_type, authorization, connection) = (
        header("Content-Type"),
        header("Authorization"),
        header("Connection"),
    );
    let view = inst.front.view(&req.remote);
    log::trace!(
        "cloud: {method} {url} (conn {:?})",
        view.as_ref().map(|v| v.id)
    );
    let body = req.body;
    let bearer = authorization
        .strip_prefix("Bearer ")
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    let subject = view.as_ref().and_then(|v| v.subject.clone());
    let identity = if let Some(s) = &subject {
        Some(Identity {
            user: s.cn.clone(),
            groups: s.groups.clone(),
            method: AuthMethod::ClientCert,
        })
    } else if let Some(t) = &bearer {
        let known = lock(&inst.shared.tokens).get(t).map(|user| Identity {
            user: user.clone(),
            groups: vec![],
            method: AuthMethod::Token,
        });
        known.or_else(|| bootstrap_identity(inst, t))
    } else if is_public(path) || is_anonymous_cluster_info(&method, path, raw_query) {
        Some(Identity {
            user: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            method: AuthMethod::Anonymous,
        })
    } else {
        None
    };
    let query = if lock(&inst.knobs).semicolon_separates {
        Query(parse_query(&raw_query.replace(';', "&")))
    } else {
        Query(parse_query(raw_query))
    };
    let is_watch = method == "GET" && (query.flag("watch") || path.contains("/watch/"));
    let record = lock(&inst.knobs).record;
    let seq = if !record {
        0
    } else {
        inst.recorder.push(RecordedRequest {
            seq: 0,
            method: method.clone(),
            path: path.to_string(),
            query: raw_query.to_string(),
            user_agent,
            accept: accept.clone(),
            accept_encoding: accept_encoding.clone(),
            content_type: content_type.clone(),
            bearer_token: bearer,
            client_cert_cn: subject.map(|s| s.cn),
            identity: identity.clone(),
            status: None,
            body: String::from_utf8_lossy(&body).into_owned(),
            headers: req.headers.clone(),
        })
    };
    let (delay, drop_mid, threshold, misanswer, misanswer_watch) = {
        let mut k = lock(&inst.knobs);
        let faulty = !is_watch && !is_health(path);
        let drop_mid = faulty && k.drop_mid > 0;
        if drop_mid {
            k.drop_mid -= 1;
        }
        let misanswer = match &mut k.misanswer {
            Some((prefix, n, status, body)) if faulty && *n > 0 && path.starts_with(&**prefix) => {
                *n -= 1;
                Some((*status, body.clone()))
            }
            _ => None,
        };
        let misanswer_watch = match &mut k.misanswer_watch {
            Some((prefix, n, lines)) if is_watch && *n > 0 && path.starts_with(&**prefix) => {
                *n -= 1;
                Some(lines.clone())
            }
            _ => None,
        };
        (
            k.delay,
            drop_mid,
            k.gzip_threshold,
            misanswer,
            misanswer_watch,
        )
    };
    if !delay.is_zero() {
        thread::sleep(delay);
    }
    let path = path.to_string();
    let rec = inst.clone();
    let front = inst.front.clone();
    let conn_id = view.as_ref().map(|v| v.id);
    let mut reply = Reply::new(
        writer,
        Box::new(move |code| rec.recorder.set_status(seq, code)),
        Box::new(move || {
            if let Some(id) = conn_id {
                front.cut(id);
            }
        }),
    );
    reply.close = connection.to_ascii_lowercase().contains("close");
    reply.gzip_ok = accept_encoding.split(',').any(|e| {
        e.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .eq_ignore_ascii_case("gzip")
    });
    reply.gzip_threshold = threshold;
    reply.drop_mid = drop_mid;
    let Some(identity) = identity else {
        return reply.error(&ApiError::unauthorized()).is_ok() && !drop_mid;
    };
    if identity.groups.iter().any(|g| g == csr::BOOTSTRAPPERS)
        && let Err(e) = csr::bootstrapper_may(&identity.user, &method, &path, is_watch)
    {
        return reply.error(&e).is_ok() && !drop_mid;
    }
    if let Some(e) = lease_fault(inst, &identity.user, &method, &path, is_watch) {
        return reply.error(&e).is_ok() && !drop_mid;
    }
    if let Some((status, body)) = misanswer {
        let mut b = reply.body(status, "application/json");
        return b.write_all(&body).and_then(|()| b.finish()).is_ok() && !drop_mid;
    }
    if let Some(lines) = misanswer_watch {
        let sent = reply.watch().and_then(|mut w| {
            for line in &lines {
                w.send(line, true)?;
            }
            w.end()
        });
        return sent.is_ok();
    }
    let ctx = Ctx {
        inst,
        identity,
        method,
        query,
        accept,
        content_type,
        body,
        closed: view.map(|v| v.closed).unwrap_or_else(never),
        conn: conn_id,
    };
    match route(&ctx, &path, reply) {
        Ok(()) => {
            log::trace!("cloud: {path}: answered");
            // A cut answer leaves the stream unusable; the front closes it.
            !drop_mid
        }
        Err(e) => {
            log::trace!("cloud: {path}: {e}");
            false
        }
    }
}

/// The answer a lease fault switch gives instead of the real one, if any (and counts it).
fn lease_fault(
    inst: &Instance,
    user: &str,
    method: &str,
    path: &str,
    watch: bool,
) -> Option<ApiError> {
    let t = leases::target(path)?;
    let mut k = lock(&inst.knobs);
    let faults = &mut k.leases;
    if let Some(r) = &mut faults.refusal
        && (!r.writes_only || leases::is_write(method))
    {
        let status = r.status;
        match &mut r.left {
            // Used up: gone, and this request is served.
            Some(0) => faults.refusal = None,
            Some(n) => {
                *n -= 1;
                return Some(leases::refusal_error(status, user, method, watch, &t));
            }
            None => return Some(leases::refusal_error(status, user, method, watch, &t)),
        }
    }
    if method == "PUT" && t.name.is_some() && faults.conflicts > 0 {
        faults.conflicts -= 1;
        drop(k);
        return Some(leases::forced_conflict(&inst.shared.store, &t));
    }
    None
}

fn route(ctx: &Ctx<'_>, path: &str, reply: Reply) -> io::Result<()> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let inst = ctx.inst;
    let store = &inst.shared.store;
    let present = |id: KindId| store.present(id);
    if matches!(segs[0], "healthz" | "livez" | "readyz") {
        if segs[0] == "readyz" && !lock(&inst.knobs).ready {
            return reply.text(
                500,
                "[-]etcd failed: reason withheld\nreadyz check failed\n",
            );
        }
        return reply.text(200, "ok");
    }
    let is_get = ctx.method == "GET";
    if is_get && matches!(segs.as_slice(), ["api"] | ["apis"]) {
        // Aggregated discovery when the client asks for it, as an apiserver since 1.26.
        match render::negotiate_discovery(&ctx.accept) {
            Ok(Some(version)) => {
                let doc = kinds::aggregated_discovery(segs[0] == "api", version, &present);
                let content_type = if version == "v2" {
                    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
                } else {
                    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
                };
                let mut b = reply.body(200, content_type);
                serde_json::to_writer(&mut b, &doc)?;
                return b.finish();
            }
            Ok(None) => {}
            Err(e) => return reply.error(&e),
        }
    }
    let doc = match segs.as_slice() {
        ["version"] => Some(kinds::version()),
        ["api"] => {
            let addr = inst
                .front
                .public_addr()
                .map(|a| a.to_string())
                .unwrap_or_default();
            Some(kinds::api_versions(&addr))
        }
        ["apis"] => Some(kinds::api_group_list(&present)),
        ["apis", g] => kinds::api_group(g, &present).or(Some(Value::Null)),
        ["api", "v1"] => kinds::api_resource_list("", "v1", &present).or(Some(Value::Null)),
        ["apis", g, v] => kinds::api_resource_list(g, v, &present).or(Some(Value::Null)),
        ["openapi", "v3"] => Some(kinds::openapi_v3_root(&present)),
        ["openapi", "v3", "api", v] => kinds::openapi_v3_doc("", v, &present).or(Some(Value::Null)),
        ["openapi", "v3", "apis", g, v] => {
            kinds::openapi_v3_doc(g, v, &present).or(Some(Value::Null))
        }
        [
            "api",
            "v1",
            "namespaces",
            ns,
            "serviceaccounts",
            name,
            "token",
        ] if ctx.method == "POST" => {
            return match super::tokens::token_request(ns, name, &ctx.body) {
                Ok(answer) => reply.json(201, &answer),
                Err(e) => reply.error(&e),
            };
        }
        ["api", "v1", rest @ ..] => return resource(ctx, "", "v1", rest, reply),
        ["apis", g, v, rest @ ..] => return resource(ctx, g, v, rest, reply),
        _ => None,
    };
    match doc {
        Some(Value::Null) | None => reply.error(&ApiError::no_route()),
        Some(_) if !is_get => reply.error(&ApiError::method_not_allowed(&ctx.method)),
        Some(d) => reply.json(200, &d),
    }
}

/// The scope and selectors of a request on a kind.
struct Filter {
    ns: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn new(
        kind: &Kind,
        ns: Option<&str>,
        name: Option<&str>,
        q: &Query,
    ) -> Result<Filter, ApiError> {
        let labels = LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(q.get("fieldSelector").unwrap_or(""))
            .map_err(ApiError::bad_request)?;
        if let Some(t) = fields.0.iter().find(|t| !kind.selectable_field(&t.field)) {
            return Err(ApiError::bad_request(format!(
                "field label not supported: {}",
                t.field
            )));
        }
        Ok(Filter {
            ns: ns.map(str::to_string),
            name: name.map(str::to_string),
            labels,
            fields,
        })
    }

    fn matches(&self, o: &Obj) -> bool {
        self.ns.as_ref().is_none_or(|n| *n == o.namespace)
            && self.name.as_ref().is_none_or(|n| *n == o.name)
            && self.labels.matches(&o.labels)
            && self.fields.matches(&|f| o.field(f))
    }

    fn has_selectors(&self) -> bool {
        !self.labels.is_empty() || !self.fields.is_empty()
    }
}

fn resource(
    ctx: &Ctx<'_>,
    group: &str,
    version: &str,
    rest: &[&str],
    reply: Reply,
) -> io::Result<()> {
    let (rest, legacy_watch) = match rest {
        ["watch", tail @ ..] => (tail, true),
        _ => (rest, false),
    };
    let (ns, res, tail) = match rest {
        ["namespaces", ns, res, tail @ ..] if !matches!(*res, "status" | "finalize") => {
            (Some(*ns), *res, tail)
        }
        [res, tail @ ..] => (None, *res, tail),
        [] => return reply.error(&ApiError::no_route()),
    };
    let store = &ctx.inst.shared.store;
    let Some(served_id) =
        kinds::find(group, version, res).filter(|&id| store.present(kinds::storage(id)))
    else {
        return reply.error(&ApiError::no_route());
    };
    // The store holds the storage version; bodies are converted to and from the served one.
    let kind_id = kinds::storage(served_id);
    let kind = &KINDS[served_id];
    let (name, sub) = (tail.first().copied(), tail.get(1).copied());
    let bad_shape = tail.len() > 2
        || (ns.is_some() && !kind.namespaced)
        || (name.is_some() && kind.namespaced && ns.is_none())
        || sub.is_some_and(|s| s != "status" || !kind.has_status)
        || name == Some("");
    if bad_shape {
        return reply.error(&ApiError::no_route());
    }
    let target = if sub.is_some() {
        Target::Status
    } else {
        Target::Main
    };
    let q = &ctx.query;
    let dry_run = q.get("dryRun") == Some("All");
    let filter = match Filter::new(kind, ns, name, q) {
        Ok(f) => f,
        Err(e) => return reply.error(&e),
    };
    let ns_s = ns.unwrap_or("");
    let result = match (ctx.method.as_str(), name) {
        ("GET", _) if legacy_watch || q.flag("watch") => {
            return watch(ctx, served_id, &filter, reply);
        }
        ("GET", Some(name)) => {
            let shape = match render::negotiate(&ctx.accept) {
                Ok(s) => s,
                Err(e) => return reply.error(&e),
            };
            match store.get(kind_id, ns_s, name) {
                Ok(o) => return single(ctx, kind, &convert::to_served(kind, &o), shape, reply),
                Err(e) => Err(e),
            }
        }
        ("GET", None) => return list(ctx, served_id, &filter, reply),
        ("POST", None) => match json_body(ctx, kind, false) {
            Ok(v) => {
                let mut v = convert::to_storage(kind, v);
                if csr::is_csr(kind_id) {
                    csr::stamp_requester(&mut v, &ctx.identity.user, &ctx.identity.groups);
                }
                store.create(kind_id, ns_s, v, dry_run).map(|o| (201, o))
            }
            Err(e) => Err(e),
        },
        ("PUT", Some(name)) if kind_id == leases::lease_kind() && target == Target::Main => {
            match json_body(ctx, kind, false) {
                Ok(v) => leases::put(store, ns_s, name, v, dry_run),
                Err(e) => Err(e),
            }
        }
        ("PUT", Some(name)) => match json_body(ctx, kind, false) {
            Ok(v) => store
                .update(
                    kind_id,
                    ns_s,
                    name,
                    convert::to_storage(kind, v),
                    target,
                    dry_run,
                )
                .map(|o| (200, o)),
            Err(e) => Err(e),
        },
        ("PATCH", Some(name)) => match json_body(ctx, kind, true) {
            Ok(p) if kind.converted => {
                // The patch is written against the served version: apply it there.
                store.get(kind_id, ns_s, name).and_then(|o| {
                    let mut v = convert::to_served(kind, &o).value();
                    merge_patch(&mut v, &p);
                    let v = convert::to_storage(kind, v);
                    store
                        .update(kind_id, ns_s, name, v, target, dry_run)
                        .map(|o| (200, o))
                })
            }
            Ok(p) => store
                .patch(kind_id, ns_s, name, &p, target, dry_run)
                .map(|o| (200, o)),
            Err(e) => Err(e),
        },
        ("DELETE", Some(name)) if sub.is_none() => {
            store.delete(kind_id, ns_s, name, dry_run).map(|o| (200, o))
        }
        ("DELETE", None) if kind.resource != "namespaces" => {
            return delete_collection(ctx, served_id, &filter, dry_run, reply);
        }
        (m, _) => Err(ApiError::method_not_allowed(m)),
    };
    match result {
        Ok((code, o)) => reply.json(code, &convert::to_served(kind, &o).value_with_kind(kind)),
        Err(e) => reply.error(&e),
    }
}

/// The request body as JSON, checking its media type (merge and strategic-merge patches
/// are both applied as JSON merge patches).
fn json_body(ctx: &Ctx<'_>, kind: &Kind, patch: bool) -> Result<Value, ApiError> {
    let ct = ctx
        .content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let ok = if patch {
        matches!(
            ct.as_str(),
            "application/merge-patch+json" | "application/strategic-merge-patch+json"
        )
    } else {
        matches!(ct.as_str(), "" | "application/json" | "*/*")
    };
    if !ok {
        return Err(ApiError::unsupported_media_type(&ctx.content_type));
    }
    let v: Value = serde_json::from_slice(&ctx.body).map_err(|e| {
        ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
    })?;
    if !patch {
        let body_kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        if !body_kind.is_empty() && body_kind != kind.kind {
            return Err(ApiError::bad_request(format!(
                "the kind in the body ({body_kind}) does not match the URL ({})",
                kind.kind
            )));
        }
    }
    if kind.group == "coordination.k8s.io" && kind.resource == "leases" {
        leases::validate(&v)?;
    }
    Ok(v)
}

fn single(ctx: &Ctx<'_>, kind: &Kind, o: &Arc<Obj>, shape: Shape, reply: Reply) -> io::Result<()> {
    let mut body = reply.body(200, "application/json");
    match shape {
        Shape::Json => {
            let mut buf = Vec::with_capacity(o.body.len() + 64);
            o.write_json(kind, true, &mut buf);
            io::Write::write_all(&mut body, &buf)?;
        }
        Shape::Table(version) => {
            let meta = ListMeta {
                rv: o.rv,
                cont: None,
                remaining: None,
            };
            let include = Include::parse(ctx.query.get("includeObject"));
            render::write_table(
                &mut body,
                kind,
                version,
                &meta,
                std::slice::from_ref(o),
                include,
            )?;
        }
        Shape::Metadata { .. } => render::write_metadata(&mut body, o)?,
    }
    body.finish()
}

fn list(ctx: &Ctx<'_>, served_id: KindId, filter: &Filter, reply: Reply) -> io::Result<()> {
    let (kind, kind_id) = (&KINDS[served_id], kinds::storage(served_id));
    let q = &ctx.query;
    let store = &ctx.inst.shared.store;
    let shape = match render::negotiate(&ctx.accept) {
        Ok(s) => s,
        Err(e) => return reply.error(&e),
    };
    let limit = match q.get("limit").map(str::parse::<usize>) {
        None | Some(Ok(0)) => None,
        Some(Ok(n)) => Some(n),
        Some(Err(_)) => {
            return reply.error(&ApiError::bad_request(
                "limit must be a non-negative integer",
            ));
        }
    };
    let cont = match q.get("continue").filter(|c| !c.is_empty()) {
        None => None,
        Some(token) => match render::parse_continue(token) {
            Ok((rv, _)) if rv < store.compacted() => {
                return reply.error(&ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. \
                     You can start a new list without the continue parameter, or use the continue \
                     token in this response to retrieve the remainder of the results. Continuing \
                     with the provided token results in an inconsistent list - objects that were \
                     created, modified, or deleted between the time the first chunk was returned \
                     and now may show up in the list.",
                ));
            }
            Ok(c) => Some(c),
            Err(e) => return reply.error(&e),
        },
    };
    let page = match store.list(
        kind_id,
        filter.ns.as_deref(),
        cont.as_ref().map(|c| &c.1),
        &|o| filter.matches(o),
        limit,
    ) {
        Ok(p) => p,
        Err(e) => return reply.error(&e),
    };
    let rv = cont.as_ref().map(|c| c.0).unwrap_or(page.rv);
    let meta = ListMeta {
        rv,
        cont: page.next.as_ref().map(|k| render::continue_token(rv, k)),
        remaining: (page.next.is_some() && !filter.has_selectors()).then_some(page.remaining),
    };
    let items: Vec<Arc<Obj>> = page
        .items
        .iter()
        .map(|o| convert::to_served(kind, o))
        .collect();
    let mut body = reply.body(200, "application/json");
    match shape {
        Shape::Json => render::write_list(&mut body, kind, &meta, &items)?,
        Shape::Table(version) => {
            let include = Include::parse(q.get("includeObject"));
            render::write_table(&mut body, kind, version, &meta, &items, include)?
        }
        Shape::Metadata { .. } => render::write_metadata_list(&mut body, &meta, &items)?,
    }
    body.finish()
}

fn delete_collection(
    ctx: &Ctx<'_>,
    served_id: KindId,
    filter: &Filter,
    dry_run: bool,
    reply: Reply,
) -> io::Result<()> {
    let (kind, kind_id) = (&KINDS[served_id], kinds::storage(served_id));
    let store = &ctx.inst.shared.store;
    let page = match store.list(
        kind_id,
        filter.ns.as_deref(),
        None,
        &|o| filter.matches(o),
        None,
    ) {
        Ok(p) => p,
        Err(e) => return reply.error(&e),
    };
    let mut gone = Vec::new();
    for o in &page.items {
        if let Ok(d) = store.delete(kind_id, &o.namespace, &o.name, dry_run) {
            gone.push(convert::to_served(kind, &d));
        }
    }
    let meta = ListMeta {
        rv: store.current_rv(),
        cont: None,
        remaining: None,
    };
    let mut body = reply.body(200, "application/json");
    render::write_list(&mut body, kind, &meta, &gone)?;
    body.finish()
}

fn watch(ctx: &Ctx<'_>, served_id: KindId, filter: &Filter, reply: Reply) -> io::Result<()> {
    let (kind, kind_id) = (&KINDS[served_id], kinds::storage(served_id));
    let q = &ctx.query;
    let inst = ctx.inst;
    let shape = match render::negotiate(&ctx.accept) {
        Ok(s) => s,
        Err(e) => return reply.error(&e),
    };
    let include = Include::parse(q.get("includeObject"));
    let since = match q.get("resourceVersion") {
        None | Some("") | Some("0") => None,
        Some(s) => match s.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return reply.error(&ApiError::bad_request(format!(
                    "invalid resource version: {s}"
                )));
            }
        },
    };
    let timeout = match q.get("timeoutSeconds").map(str::parse::<u64>) {
        // 0 means the server's default, which here is "until the client goes".
        None | Some(Ok(0)) => None,
        Some(Ok(s)) => Some(Duration::from_secs(s)),
        Some(Err(_)) => {
            return reply.error(&ApiError::bad_request("timeoutSeconds must be an integer"));
        }
    };
    let sub = match inst.shared.store.watch(kind_id, since) {
        Ok(s) => s,
        Err(e) if e.code == 410 => {
            // As the watch cache does: 200, one ERROR event with the 410 Status, then end.
            let mut w = reply.watch()?;
            w.send(&render::error_line(&e), true)?;
            return w.end();
        }
        Err(e) => return reply.error(&e),
    };
    let _open = ctx.conn.map(|conn| inst.watches.open(kind_id, conn));
    let bookmarks = q.flag("allowWatchBookmarks") && shape == Shape::Json;
    let ticker = match lock(&inst.knobs).bookmark_every {
        Some(every) if bookmarks => tick(every),
        _ => never(),
    };
    let deadline = timeout.map(after).unwrap_or_else(never);
    let mut w = reply.watch()?;
    let matches = |o: &Obj| filter.matches(o);
    // `Cloud::freeze_watches`: open, silent.
    let frozen = || {
        lock(&inst.knobs)
            .frozen
            .iter()
            .any(|(k, u)| *k == kind_id && *u == ctx.identity.user)
    };
    let mut last_rv = sub.from;
    for ev in &sub.initial {
        if frozen() {
            break;
        }
        if let Some((etype, o)) = render::visible(ev, &matches) {
            let o = convert::to_served(kind, &o);
            w.send(
                &render::event_line(kind, etype.as_str(), &o, shape, include),
                false,
            )?;
        }
        last_rv = last_rv.max(ev.rv);
    }
    if since.is_none() && q.flag("sendInitialEvents") && bookmarks {
        w.send(&render::bookmark_line(kind, last_rv, true), false)?;
    }
    w.flush()?;
    let mut dirty = false;
    loop {
        select! {
            recv(sub.rx) -> ev => match ev {
                Ok(ev) => {
                    if ev.rv <= sub.from {
                        continue;
                    }
                    last_rv = ev.rv;
                    if frozen() {
                        continue;
                    }
                    if let Some((etype, o)) = render::visible(&ev, &matches) {
                        let o = convert::to_served(kind, &o);
                        let line = render::event_line(kind, etype.as_str(), &o, shape, include);
                        w.send(&line, false)?;
                        dirty = true;
                    }
                    // Events published together go out together; a lone one at once.
                    if dirty && sub.rx.is_empty() {
                        w.flush()?;
                        dirty = false;
                    }
                }
                // The kind was removed (CRD deleted): end the stream cleanly.
                Err(_) => break,
            },
            // The client connection is gone (or the cloud was stopped): nothing to finish.
            recv(ctx.closed) -> _ => return Ok(()),
            recv(deadline) -> _ => break,
            recv(ticker) -> _ => if !frozen() {
                w.send(&render::bookmark_line(kind, last_rv, false), true)?;
            },
        }
    }
    w.end()
}

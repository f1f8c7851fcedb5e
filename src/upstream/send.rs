//! The request path to the cloud: [`Upstream::send`] picks a healthy backend and fails over
//! once to another (reporting the failed one to its health checker), `send_via` makes one
//! exchange with one server (hop-by-hop headers dropped, the hub's or the client's credentials,
//! the client's body streamed and its failure told apart from the cloud's, a stream's
//! connection kept apart with its cancel handle), and ureq's errors become [`UpstreamError`]s.
use std::io::{self, Read};

use ureq::http;
use ureq::{Agent, SendBody};

use super::agents::{Agents, LARGE_OUTPUT_BUFFER, OUTPUT_BUFFER, READ_TIMEOUT};
use super::conn::LAST_CONNECTION;
use super::plain::{Head, Limits, PlainBody, on_the_link, transport_error};
use super::token::TokenSource;
use super::{
    Answer, AnswerBody, Cancel, Encoding, LEADER_BACKEND, Outgoing, Upstream, UpstreamError, Wire,
    forwarded_headers, is_hop_by_hop,
};
use crate::http1::response::ResponseHead;
use crate::link::{self, LINK, Link};
use crate::metrics::{METRICS, Metrics};
use crate::route::{Deadline, Identity};

impl Upstream {
    /// Sends `req` to a healthy backend. An idempotent request without a body whose exchange
    /// fails before an answer is retried once on another healthy backend (or the same one
    /// when it is the only one and the failure came after connecting: a pooled connection
    /// the cloud closed looks like this too).
    ///
    /// A backend that could not be connected to (refused, or timed out connecting), or failed
    /// this request twice, is reported to its health checker ([`Backends::report_failure`]):
    /// reads stop going there until a probe, made at once, has ruled. Writes still go to a
    /// suspect server: none is answered from the cache while the cloud may take it.
    pub(crate) fn send(&self, mut req: Outgoing<'_>) -> Result<Answer, UpstreamError> {
        let agents = self.current()?;
        let write = !matches!(req.method, "GET" | "HEAD");
        let key = self.pick_key(req.headers, req.affinity.unwrap_or(req.path_and_query));
        let first = self
            .backends
            .pick(None, write, key)
            .ok_or(UpstreamError::NoHealthyBackend)?;
        let retryable = req.body.is_none() && !write;
        match self.send_to(&agents, first, &mut req) {
            // Not the cloud's failure: no error counted, no retry.
            Err(err @ (UpstreamError::ClientBody(_) | UpstreamError::ClientTooSlow(_))) => Err(err),
            Err(err @ UpstreamError::Transport { .. }) => {
                Metrics::inc(&METRICS.upstream_errors);
                // A connection that could not be made says the server may be down. An answer
                // slow to come does not (a live apiserver may take long over a big list: the
                // periodic probe judges), nor does a pooled connection that broke (the cloud
                // closed it while idle), until it happens twice.
                let down = err.never_sent();
                let slow = matches!(err, UpstreamError::Transport { timeout: true, .. });
                if down {
                    self.backends.report_failure(first);
                }
                if !retryable {
                    return Err(err);
                }
                // The same server again only for a broken pooled connection.
                let second = match self.backends.pick(Some(first), false, key) {
                    Some(other) => other,
                    None if !down && !slow => first,
                    None => return Err(err),
                };
                log::info!("retrying on another cloud server after: {err}");
                Metrics::inc(&METRICS.upstream_retries);
                // The agents of now: TLS material may have changed meanwhile.
                let agents = self.current().unwrap_or(agents);
                self.send_to(&agents, second, &mut req).inspect_err(|err| {
                    Metrics::inc(&METRICS.upstream_errors);
                    let slow = matches!(err, UpstreamError::Transport { timeout: true, .. });
                    if matches!(err, UpstreamError::Transport { .. }) && (err.never_sent() || !slow)
                    {
                        self.backends.report_failure(second);
                    }
                })
            }
            Err(err) => {
                Metrics::inc(&METRICS.upstream_errors);
                Err(err)
            }
            ok => ok,
        }
    }

    /// Sends `req` to the pool's leader hub at `base` (`https://<ip>:<port>`), whatever the
    /// cloud's health, with the hub's agents (its client certificate; the leader's
    /// certificate verified against the cluster CA and the IP in `base`), counted on the
    /// link with `base` as the server. No retry, no health report: the caller (a feeder)
    /// marks the leader and goes on from the cloud. [`Answer::backend`] is
    /// [`LEADER_BACKEND`]. Never the hub's bearer token: a leader is another node, which
    /// needs only the client certificate, and must not collect the pool's cloud tokens.
    pub(crate) fn send_to_base(
        &self,
        base: &str,
        mut req: Outgoing<'_>,
    ) -> Result<Answer, UpstreamError> {
        let agents = self.current()?;
        self.send_via(&agents, base, LEADER_BACKEND, &mut req, false)
    }

    fn send_to(
        &self,
        agents: &Agents,
        backend: usize,
        req: &mut Outgoing<'_>,
    ) -> Result<Answer, UpstreamError> {
        self.send_via(agents, &self.backends.get(backend).base, backend, req, true)
    }

    /// Sends `req` to `server`, reporting `backend` in the answer; with the hub's bearer
    /// token (for [`Identity::Hub`]) only when `cloud`.
    fn send_via(
        &self,
        agents: &Agents,
        server: &str,
        backend: usize,
        req: &mut Outgoing<'_>,
        cloud: bool,
    ) -> Result<Answer, UpstreamError> {
        // The series is resolved once, before sending: the body reader only adds to it.
        let link = LINK.link(
            server,
            req.verb.as_str(),
            link::component_of(req.headers),
            req.path_and_query,
            !cloud,
        );
        // A stream gets a connection of its own, which can be shut down from another thread
        // when its client goes away (ureq's); bounded exchanges share pooled connections.
        let total = match req.deadline {
            Deadline::Bounded(total) => total,
            Deadline::Stream(total) => {
                return self.send_stream(agents, server, backend, req, cloud, link, total);
            }
        };
        let plain = agents.of(req.identity).pooled;
        let mut head = Head::new(req.method, server, req.path_and_query)?;
        self.head_fields(req, cloud, |name, value| head.add(name, value))?;
        let chunked = req.body.as_ref().is_some_and(|b| b.length.is_none());
        if chunked {
            head.add("transfer-encoding", "chunked")?;
        }
        let head = head.finish();
        let body = req
            .body
            .as_mut()
            .map(|b| (&mut *b.reader as &mut dyn Read, chunked));
        let (head, body) = plain.exchange(
            server,
            &head,
            req.method == "HEAD",
            body,
            Limits::new(total, Some(READ_TIMEOUT)),
            &mut |sent| link.request(sent),
        )?;
        Ok(plain_answer(head, body, link, backend))
    }

    /// [`Upstream::send_via`] for a stream (a watch): ureq's, on a connection of its own,
    /// with its cancel handle.
    #[allow(clippy::too_many_arguments)]
    fn send_stream(
        &self,
        agents: &Agents,
        server: &str,
        backend: usize,
        req: &mut Outgoing<'_>,
        cloud: bool,
        link: Link,
        total: std::time::Duration,
    ) -> Result<Answer, UpstreamError> {
        let url = format!("{server}{}", req.path_and_query);
        let request_error = |e: http::Error| UpstreamError::Request(e.to_string());
        let (head, longest_line) = self.request_head(req, &url, cloud).map_err(request_error)?;
        let agent = agents.of(req.identity).stream;
        // A line too long for the small buffer gets a large one for this request.
        let output_buffer = (longest_line > OUTPUT_BUFFER).then_some(LARGE_OUTPUT_BUFFER);
        LAST_CONNECTION.with(|last| last.borrow_mut().take());
        let result = match req.body.as_mut() {
            Some(body) => {
                let mut reader = NotingBody::new(&mut body.reader, body.length);
                let request = head.map(|()| SendBody::from_reader(&mut reader));
                let result = agent.run(configure(agent, request, total, output_buffer));
                if on_the_link(&result) {
                    link.request(reader.sent);
                }
                if reader.failed {
                    // ureq stopped because the client's body did: its error says why.
                    return Err(UpstreamError::ClientBody(
                        result.err().map(|e| e.to_string()).unwrap_or_default(),
                    ));
                }
                // The request's time ran out before the client had sent its whole body.
                let whole_request = matches!(
                    result,
                    Err(ureq::Error::Timeout(
                        ureq::Timeout::Global | ureq::Timeout::PerCall | ureq::Timeout::SendBody
                    ))
                );
                match result {
                    Err(ureq::Error::Timeout(t)) if whole_request && !reader.ended => {
                        return Err(UpstreamError::ClientTooSlow(t.to_string()));
                    }
                    result => result,
                }
            }
            None => {
                let result = agent.run(configure(agent, head, total, output_buffer));
                if on_the_link(&result) {
                    link.request(0);
                }
                result
            }
        };
        let response = result.map_err(|e| transport_error(server, e))?;
        let cancel = LAST_CONNECTION
            .with(|last| last.borrow_mut().take())
            .map(Cancel);
        Ok(answer(response, link, backend, cancel))
    }

    /// The fields of the request head for `req`, each given to `add`, and the longest line
    /// of the head: the client's headers but the hop-by-hop ones (and those its `Connection`
    /// names), `accept` when the hub sets it, `accept-encoding: gzip` (alone) for
    /// [`Encoding::Gzip`], `authorization` only the client's own, or the hub's bearer token
    /// (for [`Identity::Hub`]) when `cloud`, and the body's `content-length` when known.
    fn head_fields<E>(
        &self,
        req: &Outgoing<'_>,
        cloud: bool,
        mut add: impl FnMut(&str, &str) -> Result<(), E>,
    ) -> Result<usize, E> {
        // ureq writes the request head a line at a time through its output buffer: the
        // longest line must fit (the request line, with room for the version).
        let mut longest_line = 0;
        // The hub asks for gzip itself: the client's own wish does not go (it is honoured by
        // the relay, which inflates for a client that did not ask).
        let gzip = req.encoding == Encoding::Gzip && super::inflate::ask_gzip();
        for (name, value) in forwarded_headers(req.headers, req.identity, req.accept.is_some()) {
            if gzip && crate::ascii::eq_ignore_ascii_case(name, "accept-encoding") {
                continue;
            }
            longest_line = longest_line.max(name.len() + value.len() + 4);
            add(name, value)?;
        }
        if let Some(accept) = req.accept {
            add("accept", accept)?;
        }
        if gzip {
            add("accept-encoding", "gzip")?;
        }
        if req.identity == Identity::Hub
            && cloud
            && let Some(token) = self.token.as_ref().and_then(TokenSource::current)
        {
            longest_line = longest_line.max(token.len() + 24);
            add("authorization", &format!("Bearer {token}"))?;
        }
        if let Some(length) = req.body.as_ref().and_then(|b| b.length) {
            add("content-length", &length.to_string())?;
        }
        Ok(longest_line)
    }

    /// The request head for `req` to `url` as ureq takes it ([`Upstream::head_fields`]),
    /// and its longest line.
    fn request_head(
        &self,
        req: &Outgoing<'_>,
        url: &str,
        cloud: bool,
    ) -> Result<(http::Request<()>, usize), http::Error> {
        // Set in place: a builder moves the whole request through each of its calls.
        let mut head = http::Request::new(());
        *head.method_mut() = http::Method::from_bytes(req.method.as_bytes())?;
        *head.uri_mut() = http::Uri::try_from(url)?;
        let headers = head.headers_mut();
        let longest_line = self.head_fields(req, cloud, |name, value| {
            headers.try_append(
                http::HeaderName::from_bytes(name.as_bytes())?,
                http::HeaderValue::from_str(value)?,
            )?;
            Ok::<(), http::Error>(())
        })?;
        Ok((head, longest_line.max(req.method.len() + url.len() + 12)))
    }
}

/// The cloud's answer on a pooled connection as the hub hands it on: status, the headers
/// but the hop-by-hop ones, the length it announced, the body counted on `link`.
fn plain_answer(head: ResponseHead, body: PlainBody, link: Link, backend: usize) -> Answer {
    let ResponseHead {
        status,
        mut headers,
    } = head;
    let gzip = super::inflate::is_gzip(
        crate::http1::find_header(&headers, "content-encoding").map(str::as_bytes),
    );
    let length =
        crate::http1::find_header(&headers, "content-length").and_then(|v| v.trim().parse().ok());
    headers.retain(|(name, _)| !is_hop_by_hop(name));
    Answer {
        status,
        headers,
        length,
        body: AnswerBody::raw(Wire::Pooled(body), link, gzip),
        backend,
        cancel: None,
    }
}

/// The cloud's answer as the hub hands it on: status, the headers but the hop-by-hop ones, the
/// length it announced, the body counted on `link`.
fn answer(
    response: http::Response<ureq::Body>,
    link: Link,
    backend: usize,
    cancel: Option<Cancel>,
) -> Answer {
    let (parts, body) = response.into_parts();
    let gzip = super::inflate::is_gzip(parts.headers.get("content-encoding").map(|v| v.as_bytes()));
    let mut length = None;
    let mut headers = Vec::with_capacity(parts.headers.len());
    for (name, value) in &parts.headers {
        if name.as_str() == "content-length" {
            length = value.to_str().ok().and_then(|v| v.trim().parse().ok());
        }
        if !is_hop_by_hop(name.as_str()) {
            // Visible ASCII, nearly always: taken as it is; other bytes as UTF-8, lossily.
            let value = match value.to_str() {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(value.as_bytes()).into_owned(),
            };
            headers.push((name.as_str().to_owned(), value));
        }
    }
    Answer {
        status: parts.status.as_u16(),
        headers,
        length,
        body: AnswerBody::raw(Wire::Stream(body.into_reader()), link, gzip),
        backend,
        cancel,
    }
}

/// The client's body as ureq reads it, noting a failed read and the body's end: ureq's
/// error is the client's, not the cloud's, when a read failed, and when the request ran out
/// of time before the body was all read (a client trickling it in).
struct NotingBody<'r, 'b> {
    reader: &'r mut &'b mut dyn Read,
    failed: bool,
    /// The end was read (a chunked body), or `length` bytes were (ureq reads no further).
    ended: bool,
    length: Option<u64>,
    sent: u64,
}

impl<'r, 'b> NotingBody<'r, 'b> {
    /// Wraps a body of `length` bytes (`None`: chunked); an empty one has ended already.
    fn new(reader: &'r mut &'b mut dyn Read, length: Option<u64>) -> Self {
        NotingBody {
            reader,
            failed: false,
            ended: length == Some(0),
            length,
            sent: 0,
        }
    }
}

impl Read for NotingBody<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let result = self.reader.read(buf);
        self.failed |= matches!(&result, Err(e) if e.kind() != io::ErrorKind::Interrupted);
        if let Ok(n) = result {
            self.sent += n as u64;
            self.ended |= (n == 0 && !buf.is_empty()) || self.length == Some(self.sent);
        }
        result
    }
}

/// A stream's request with its own timeouts: a watch may be silent for minutes; only the
/// stream's own lifetime (`total`) bounds it, and its answer's head [`READ_TIMEOUT`].
fn configure<S: ureq::AsSendBody>(
    agent: &Agent,
    request: http::Request<S>,
    total: std::time::Duration,
    output_buffer: Option<usize>,
) -> http::Request<S> {
    let mut builder = agent.configure_request(request);
    if let Some(size) = output_buffer {
        builder = builder.output_buffer_size(size);
    }
    builder
        .timeout_global(Some(total))
        .timeout_recv_response(Some(READ_TIMEOUT))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_read_whole_is_ended_with_or_without_a_last_empty_read() {
        let mut buf = [0u8; 8];
        // A declared length: ureq stops reading once it has that many bytes.
        let mut source: &[u8] = b"hello";
        let mut reader: &mut dyn Read = &mut source;
        let mut body = NotingBody::new(&mut reader, Some(5));
        assert_eq!(body.read(&mut buf[..3]).unwrap(), 3);
        assert!(!body.ended, "2 bytes still to come");
        assert_eq!(body.read(&mut buf).unwrap(), 2);
        assert!(body.ended);
        // Chunked: the end is the empty read.
        let mut source: &[u8] = b"hello";
        let mut reader: &mut dyn Read = &mut source;
        let mut body = NotingBody::new(&mut reader, None);
        assert_eq!(body.read(&mut buf).unwrap(), 5);
        assert!(!body.ended);
        assert_eq!(body.read(&mut buf).unwrap(), 0);
        assert!(body.ended && !body.failed);
    }
}

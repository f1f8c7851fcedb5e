//! Exec and attach as the stand-in answers them: the container is `cat`, so stdin comes back
//! on stdout, and when stdin ends the command succeeds.
//!
//! Over WebSocket (kubectl ≥ 1.30; `v5.channel.k8s.io`, or `v4.channel.k8s.io`) every
//! binary message starts with its channel: 0 stdin, 1 stdout, 3 the error channel, which
//! carries the command's `Status`, and in v5 255, the close of a channel (`[255, 0]`: stdin
//! ended). Over SPDY (`KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`, or an apiserver that refuses
//! the WebSocket; `X-Stream-Protocol-Version: v4.channel.k8s.io`) each channel is a stream,
//! opened by kubectl in the order error, stdin, stdout, stderr, each only when the query asks
//! for it (client-go's `streamProtocolV2.createStreams`), which is how they are told apart:
//! the stream headers naming them are never decoded (see `portforward.rs`).

use std::io::{self, Read, Write};

use super::super::util::parse_query;
use super::http1::Request;
use super::portforward::{self, Frame, Plain, Spdy};
use super::websocket;

const V5: &str = "v5.channel.k8s.io";
const V4: &str = "v4.channel.k8s.io";
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const ERROR: u8 = 3;
/// v5: the next byte names a channel the client closed.
const CLOSE: u8 = 255;
/// The `Status` of a command that exited 0, as the kubelet writes it on the error channel.
const SUCCESS: &[u8] = br#"{"metadata":{},"status":"Success"}"#;

/// Serves `req` when it asks to exec or attach (an `…/exec` or `…/attach` path, a WebSocket
/// or SPDY upgrade) and returns true; false (nothing written) for any other request.
pub(super) fn serve(req: &Request, r: &mut dyn Read, w: &mut dyn Write) -> io::Result<bool> {
    let (path, query) = req.url.split_once('?').unwrap_or((&req.url, ""));
    let exec = path.ends_with("/exec") || path.ends_with("/attach");
    if !exec || !websocket::is_streaming_upgrade(req) {
        return Ok(false);
    }
    let query = parse_query(query);
    let asked = |name: &str| {
        query
            .iter()
            .any(|(k, v)| k == name && (v == "true" || v == "1"))
    };
    if websocket::is_websocket(req) {
        if let Some(mut ws) = websocket::accept(req, &[V5, V4], r, w)? {
            echo_channels(&mut ws, asked("stdin"))?;
        }
    } else if portforward::switch_to_spdy(req, &[V4], w)? {
        // The streams client-go opens, in its order; the first is the error stream.
        let roles: Vec<Role> = [
            (Role::Error, true),
            (Role::Stdin, asked("stdin")),
            (Role::Stdout, asked("stdout")),
            (Role::Stderr, asked("stderr") && !asked("tty")),
        ]
        .into_iter()
        .filter_map(|(role, opened)| opened.then_some(role))
        .collect();
        echo_streams(&mut Plain { r, w }, &roles)?;
    }
    Ok(true)
}

/// WebSocket: stdin to stdout until stdin closes (v5) or the client goes (v4); with no
/// stdin, `cat` ends at once.
fn echo_channels(ws: &mut websocket::WebSocket<'_>, stdin: bool) -> io::Result<()> {
    if !stdin {
        ws.send(&[&[ERROR], SUCCESS].concat())?;
        return ws.close();
    }
    while let Some(message) = ws.receive()? {
        match message.split_first() {
            Some((&STDIN, data)) if !data.is_empty() => ws.send(&[&[STDOUT], data].concat())?,
            Some((&CLOSE, [STDIN])) => {
                ws.send(&[&[ERROR], SUCCESS].concat())?;
                return ws.close();
            }
            // Resize (4) and anything else: a `cat` has no use for it.
            _ => {}
        }
    }
    Ok(())
}

/// What a SPDY stream of exec carries.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Error,
    Stdin,
    Stdout,
    Stderr,
}

/// SPDY: stdin's data to stdout; stdin's FIN (or, with no stdin, the last stream opened)
/// ends the command: Success on the error stream, and every stream the stand-in writes
/// finished.
fn echo_streams(conn: &mut Plain<'_>, roles: &[Role]) -> io::Result<()> {
    let mut spdy = Spdy::default();
    let mut opened: Vec<(u32, Role)> = Vec::new();
    let stream_of = |opened: &[(u32, Role)], role| opened.iter().find(|s| s.1 == role).map(|s| s.0);
    while let Some(frame) = portforward::read_frame(conn)? {
        let end = match frame {
            Frame::Syn { stream, fin } => {
                opened.push((
                    stream,
                    roles.get(opened.len()).copied().unwrap_or(Role::Stderr),
                ));
                spdy.reply(conn, stream, fin)?;
                opened.len() == roles.len() && !roles.contains(&Role::Stdin)
            }
            Frame::Data { stream, fin, data }
                if stream_of(&opened, Role::Stdin) == Some(stream) =>
            {
                if let Some(stdout) = stream_of(&opened, Role::Stdout)
                    && !data.is_empty()
                {
                    spdy.data(conn, stdout, &data, false)?;
                }
                fin
            }
            Frame::Ping(id) => {
                spdy.ping(conn, id)?;
                false
            }
            Frame::GoAway => break,
            Frame::Data { .. } | Frame::Other => false,
        };
        if end {
            for &(stream, role) in &opened {
                match role {
                    Role::Error => spdy.data(conn, stream, SUCCESS, true)?,
                    Role::Stdout | Role::Stderr => spdy.data(conn, stream, &[], true)?,
                    Role::Stdin => {}
                }
            }
        }
    }
    Ok(())
}

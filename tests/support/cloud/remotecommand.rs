//! Exec and attach as the stand-in answers them: the container is `cat`, so stdin comes back
//! on stdout, and when stdin ends the command succeeds.
//!
//! Over WebSocket (kubectl ≥ 1.30; `v5.channel.k8s.io`, or `v4.channel.k8s.io`) every
//! binary message starts with its channel: 0 stdin, 1 stdout, 3 the error channel, which
//! carries the command's `Status`, and in v5 255, the close of a channel (`[255, 0]`: stdin
//! ended). Over SPDY (`KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false`, or an apiserver that refuses
//! the WebSocket; `X-Stream-Protocol-Version: v4.channel.k8s.io`) each channel is a stream,
//! opened by kubectl in the order error, stdin, stdout, stderr (client-go's
//! `streamProtocolV2.createStreams`), which is how they are told apart: the stream headers
//! naming them are never decoded (see `portforward.rs`).

use std::io::{self, Read, Write};

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

/// Serves `req` when it asks to exec or attach (an `…/exec` or `…/attach` path) and returns
/// true; false (nothing written) for any other request.
pub(super) fn serve(req: &Request, r: &mut dyn Read, w: &mut dyn Write) -> io::Result<bool> {
    let path = req.url.split('?').next().unwrap_or("");
    if !(path.ends_with("/exec") || path.ends_with("/attach")) {
        return Ok(false);
    }
    if websocket::is_websocket(req) {
        if let Some(mut ws) = websocket::accept(req, &[V5, V4], r, w)? {
            echo_channels(&mut ws)?;
        }
    } else if portforward::switch_to_spdy(req, &[V4], w)? {
        echo_streams(&mut Plain { r, w })?;
    }
    Ok(true)
}

/// WebSocket: stdin to stdout until stdin closes (v5) or the client goes (v4).
fn echo_channels(ws: &mut websocket::WebSocket<'_>) -> io::Result<()> {
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

/// SPDY: the second stream (stdin) to the third (stdout); stdin's FIN ends the command:
/// Success on the first stream (error), and every stream finished.
fn echo_streams(conn: &mut Plain<'_>) -> io::Result<()> {
    let mut spdy = Spdy::default();
    let mut opened: Vec<u32> = Vec::new();
    while let Some(frame) = portforward::read_frame(conn)? {
        match frame {
            Frame::Syn { stream, fin } => {
                opened.push(stream);
                spdy.reply(conn, stream, fin)?;
            }
            Frame::Data { stream, fin, data } if opened.get(1) == Some(&stream) => {
                if let Some(&stdout) = opened.get(2)
                    && !data.is_empty()
                {
                    spdy.data(conn, stdout, &data, false)?;
                }
                if fin {
                    // Stdin is the second stream: the first (error) is there.
                    let error = opened[0];
                    spdy.data(conn, error, SUCCESS, true)?;
                    for &s in &opened[2..] {
                        spdy.data(conn, s, &[], true)?;
                    }
                }
            }
            Frame::Ping(id) => spdy.ping(conn, id)?,
            Frame::GoAway => break,
            Frame::Data { .. } | Frame::Other => {}
        }
    }
    Ok(())
}

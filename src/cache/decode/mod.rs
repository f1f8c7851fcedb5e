//! Incremental decoding of apiserver JSON bodies into cacheable units.
//!
//! The cache writer receives a response body as whatever chunks the network delivered and
//! must persist each object without holding a whole list: a 50 MB list is cut item by item.
//! [`JsonStream`] is a byte-level JSON validator (a pushdown automaton: nesting, strings,
//! escapes, numbers, literals) that cuts the body into [`Unit`]s by shape:
//!
//! ```text
//!   Object       {.............................}          -> Object(whole document)
//!   List         { "kind":"PodList", "items":[ {..}, {..} ], "metadata":{..} }
//!                  `-- ListMember --'           `ListItem'  `---- ListMember ----'
//!   WatchStream  {"type":..,"object":..}\n{"type":..}\n    -> WatchEvent per object
//! ```
//!
//! The scan takes a step per token, not per byte (issue 34: about 40 instructions a byte of
//! a list of real pods before): string content is searched a word at a time (past a few
//! words, by memchr: [`long_run_end`]), runs of digits, literals and spaces are taken at once, and a container inside a unit with nothing in it
//! to locate is validated by a loop of its own ([`scan_container`]) and taken whole. Anything
//! unusual there (an error, the chunk's end) is left to the steps, so units, errors and their
//! offsets never depend on how the body was cut.
//!
//! Only the unit being assembled is buffered, and only when it spans chunks: a unit that lies
//! within one chunk is handed out as a slice of that chunk. [`BodyDecoder`] puts an optional
//! gzip decoder in front, inflating at most a few tens of KiB at a time.
//!
//! A unit is handed out as soon as it is complete, before the rest of the body is seen: the
//! caller commits what it persisted only once `finish()` returns `Ok` (a body can still turn
//! out truncated, corrupt, or followed by junk). Errors carry the byte offset and never panic.
//!
//! This module knows nothing of files, requests or Kubernetes kinds; units are raw JSON text,
//! valid except that string contents are not checked for UTF-8 (their consumer parses them).

use std::fmt;

mod body;

pub(crate) use body::BodyDecoder;

/// Deepest nesting accepted; deeper input is a syntax error. Kubernetes objects nest a few
/// dozen levels at most, and serde_json refuses more than 128 anyway.
pub(crate) const MAX_DEPTH: usize = 256;

/// A unit buffer that grew past this is released after use rather than kept for the next one,
/// so one huge object does not pin its memory for the rest of the stream.
const KEEP_BUFFER_BYTES: usize = 1 << 20;

/// What a response body is expected to hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyShape {
    /// One JSON object: the answer to a get, create, update or patch.
    Object,
    /// One JSON object with an `items` array: the answer to a list.
    List,
    /// A sequence of JSON objects, one per watch event.
    WatchStream,
}

/// A piece of a body, handed to the sink as soon as it is complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit<'a> {
    /// [`BodyShape::Object`]: the whole document.
    Object(&'a [u8]),
    /// A top-level member of a list other than `items` (`kind`, `apiVersion`, `metadata`):
    /// its decoded name and its raw JSON value.
    ListMember {
        /// The member name.
        key: &'a str,
        /// The member's value, raw JSON.
        value: &'a [u8],
    },
    /// One element of the list's `items` array, raw JSON.
    ListItem(&'a [u8]),
    /// One `{"type":..,"object":..}` of a watch stream, raw JSON.
    WatchEvent(&'a [u8]),
}

/// A member path from a unit's root (names, outermost first) whose value a stream locates
/// while it validates, so that its consumer need not parse the unit again to find it.
pub(crate) type Path = &'static [&'static str];

/// Most paths one stream locates.
pub(crate) const MAX_PATHS: usize = 12;

/// Deepest value a path reaches, counting the unit's root as 0.
const MAX_PATH_DEPTH: usize = 4;

/// Where the values at a stream's paths lie in the unit just handed out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Located {
    /// Per path (same index), the byte range of its raw JSON value in the unit.
    spans: [Option<(usize, usize)>; MAX_PATHS],
    /// A name on the way to a path held an escape, a non-ASCII byte, or came twice: the
    /// spans cannot be trusted, and the consumer must parse the unit itself.
    unsure: bool,
}

impl Located {
    /// The byte range of path `index`'s value; `Err(())` when the spans cannot be trusted.
    #[allow(clippy::result_unit_err)]
    pub(crate) fn span(&self, index: usize) -> Result<Option<(usize, usize)>, ()> {
        if self.unsure {
            return Err(());
        }
        Ok(self.spans.get(index).copied().flatten())
    }
}

/// The locating state of a stream: its paths and where the unit being scanned stands.
#[derive(Clone, Debug, Default)]
struct Locator {
    paths: &'static [Path],
    found: Located,
    /// Per value depth in the unit: the object opened there, as the node (path, prefix length)
    /// it stands at, when its members may lie on a path.
    objects: [Option<(u8, u8)>; MAX_PATH_DEPTH],
    /// Per value depth: the value being scanned there lies on a path: (path, prefix length,
    /// start in the unit).
    values: [Option<(u8, u8, usize)>; MAX_PATH_DEPTH],
    /// The member name just read leads to this node.
    pending: Option<(u8, u8)>,
    /// Where the member name being read starts in the unit (its opening quote).
    name_from: usize,
}

impl Locator {
    /// The node reached from `node` by member `name`, if any path goes that way.
    fn child(&self, (path, len): (u8, u8), name: &[u8]) -> Option<(u8, u8)> {
        let (len, prefix) = (len as usize, &self.paths[path as usize][..len as usize]);
        let q = self
            .paths
            .iter()
            .position(|p| p.len() > len && p[..len] == *prefix && p[len].as_bytes() == name)?;
        Some((q as u8, len as u8 + 1))
    }
}

/// Why a body could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum DecodeError {
    /// The body is not JSON of the expected shape.
    Syntax {
        /// Offset of the offending byte in the (decompressed) body.
        offset: u64,
        /// What was wrong there.
        what: &'static str,
    },
    /// A unit (or a list member name) is longer than the decoder's limit.
    UnitTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The body ended inside a unit or before its document was complete.
    Truncated,
    /// The gzip framing or the compressed data is corrupt.
    Gzip(String),
    /// A unit the scanner took that serde_json cannot read (a lone surrogate escape, a number
    /// past f64, nesting past serde's 128): the response filters cannot see into it.
    Unreadable(String),
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Syntax { offset, what } => {
                write!(f, "invalid JSON body at byte {offset}: {what}")
            }
            DecodeError::UnitTooLarge { limit } => {
                write!(
                    f,
                    "an object in the body is larger than the {limit} byte limit"
                )
            }
            DecodeError::Truncated => f.write_str("the body ended before its JSON was complete"),
            DecodeError::Gzip(why) => write!(f, "invalid gzip body: {why}"),
            DecodeError::Unreadable(why) => {
                write!(f, "an object in the body cannot be read: {why}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// Where the automaton is, between two bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Before a top-level value (and, in a watch stream, between events).
    Top,
    /// After the one top-level value of an Object or List body: only whitespace may follow.
    Trailing,
    /// A value is required (after ':' or after ',' in an array).
    Value,
    /// After '[': a value or ']'.
    ArrayStart,
    /// After '{': a member name or '}'.
    ObjectStart,
    /// After ',' in an object: a member name.
    Name,
    /// After a member name: ':'.
    Colon,
    /// After a value inside a container: ',' or the closing bracket.
    AfterValue,
    Str {
        name: bool,
    },
    Escape {
        name: bool,
    },
    Hex {
        name: bool,
        left: u8,
    },
    Number(Num),
    /// Inside `true`, `false` or `null`; the bytes still expected.
    Literal(&'static [u8]),
}

/// Where a number is, following the JSON grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    Exp,
    ExpSign,
    ExpInt,
}

impl Num {
    fn can_end(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::ExpInt)
    }

    fn step(self, b: u8) -> Option<Num> {
        Some(match (self, b) {
            (Num::Minus, b'0') => Num::Zero,
            (Num::Minus, b'1'..=b'9') => Num::Int,
            (Num::Int, b'0'..=b'9') => Num::Int,
            (Num::Zero | Num::Int, b'.') => Num::Dot,
            (Num::Dot | Num::Frac, b'0'..=b'9') => Num::Frac,
            (Num::Zero | Num::Int | Num::Frac, b'e' | b'E') => Num::Exp,
            (Num::Exp, b'+' | b'-') => Num::ExpSign,
            (Num::Exp | Num::ExpSign | Num::ExpInt, b'0'..=b'9') => Num::ExpInt,
            _ => return None,
        })
    }
}

/// What the bytes being captured will become.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Capture {
    /// A top-level member name of a list.
    Name,
    Object,
    Member,
    Item,
    Event,
}

#[inline(always)]
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The bytes of `w` (little-endian) that end a run of string content flagged by their high
/// bit: those that equal `"` or `\\` or lie below 0x20. A test can also flag a byte above one
/// that truly matched (a borrow carries upwards), never one below it, so the lowest flag is
/// always the first match, and a word with no match has no flag.
#[inline(always)]
fn stop_flags(w: u64) -> u64 {
    const QUOTES: u64 = ONES * b'"' as u64;
    const BACKSLASHES: u64 = ONES * b'\\' as u64;
    let (q, b) = (w ^ QUOTES, w ^ BACKSLASHES);
    ((q.wrapping_sub(ONES) & !q) | (b.wrapping_sub(ONES) & !b) | control_flags(w)) & HIGH
}

/// The bytes of `w` below 0x20 flagged by their high bit (the lowest flag is the first such
/// byte, as in [`stop_flags`]); other high bits may be set too: mask with `HIGH`.
#[inline(always)]
fn control_flags(w: u64) -> u64 {
    w.wrapping_sub(ONES * 0x20) & !w
}

/// Where the run of plain string content starting at `bytes[i]` ends: the index of the first
/// `"`, `\\` or control character at or after `i`, or `bytes.len()`.
///
/// The first word is tested here, 8 bytes at once ([`stop_flags`]; issue 34: the byte by
/// byte search cost about 4 instructions a byte of a list). Most member names and many
/// values end in it; a longer run goes on in [`long_run_end`].
#[inline(always)]
fn string_run_end(bytes: &[u8], i: usize) -> usize {
    match bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        Some(word) => match stop_flags(u64::from_le_bytes(*word)) {
            0 => long_run_end(bytes, i + 8),
            hits => i + (hits.trailing_zeros() / 8) as usize,
        },
        None => short_run_end(bytes, i),
    }
}

/// [`string_run_end`] byte by byte, for the last bytes of a chunk.
fn short_run_end(bytes: &[u8], mut i: usize) -> usize {
    while i < bytes.len() && !matches!(bytes[i], b'"' | b'\\' | 0..=0x1f) {
        i += 1;
    }
    i
}

/// [`string_run_end`] past its first word: three more words as it tests them, then
/// [`far_run_end`].
///
/// Issue 34: the word by word search of a whole run cost about 3 instructions a byte at the
/// release build's opt-level, most of a list of pods with long strings (annotations,
/// certificates, config blobs); memchr's call costs more than a few words, hence those first
/// (and in a function of their own, which saves few registers).
#[inline(never)]
fn long_run_end(bytes: &[u8], mut i: usize) -> usize {
    for _ in 0..3 {
        let Some(word) = bytes.get(i..).and_then(<[u8]>::first_chunk::<8>) else {
            return short_run_end(bytes, i);
        };
        match stop_flags(u64::from_le_bytes(*word)) {
            0 => i += 8,
            hits => return i + (hits.trailing_zeros() / 8) as usize,
        }
    }
    far_run_end(bytes, i)
}

/// [`string_run_end`] from `bytes[i]` on a long run: the first `"` or `\\` found by memchr
/// (SIMD where the machine has it), and the first control character before it.
#[inline(never)]
fn far_run_end(bytes: &[u8], i: usize) -> usize {
    let Some(rest) = bytes.get(i..) else {
        return i;
    };
    let end = memchr::memchr2(b'"', b'\\', rest).unwrap_or(rest.len());
    i + first_control(&rest[..end]).unwrap_or(end)
}

/// The index of the first byte below 0x20 in `run`: blocks of 64 bytes with none are passed
/// over at a test each ([`control_flags`] flags none in them), then words, then bytes.
fn first_control(run: &[u8]) -> Option<usize> {
    /// Word `at` of `block` (a constant index: one load, no bounds check).
    #[inline(always)]
    fn word(block: &[u8; 64], at: usize) -> u64 {
        let mut w = [0; 8];
        w.copy_from_slice(&block[at..at + 8]);
        u64::from_le_bytes(w)
    }
    let (blocks, _) = run.as_chunks::<64>();
    let clean_blocks = blocks
        .iter()
        .take_while(|block| {
            // Spelled out: the release build's opt-level does not unroll a loop.
            let w = |at| control_flags(word(block, at));
            let flags = w(0) | w(8) | w(16) | w(24) | w(32) | w(40) | w(48) | w(56);
            flags & HIGH == 0
        })
        .count();
    let from = clean_blocks * 64;
    let (words, _) = run.get(from..)?.as_chunks::<8>();
    let clean_words = words
        .iter()
        .take_while(|w| control_flags(u64::from_le_bytes(**w)) & HIGH == 0)
        .count();
    let from = from + clean_words * 8;
    let at = run.get(from..)?.iter().position(|&b| b < 0x20)?;
    Some(from + at)
}

/// What [`scan_container`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scanned {
    /// A valid container, ending just before this index.
    Whole(usize),
    /// Not valid JSON (or too deep) at this index.
    Invalid(usize),
    /// The chunk ended inside it; the containers open there are noted.
    Cut,
}

/// Where a container ends; which part of the grammar comes next inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// A value, or `]` (just after `[`).
    FirstItem,
    /// A value.
    Value,
    /// A member name, or `}` (just after `{`).
    FirstName,
    /// A member name.
    Name,
    /// `:`.
    Colon,
    /// `,` or the closing bracket.
    After,
}

/// Validates the container opening at `bytes[i]` as the steps of [`JsonStream`] would, but
/// with nothing to capture or locate: a tight loop over its tokens, taking strings, numbers,
/// literals and spaces in runs. At most `room` containers may open (the depth limit). On
/// [`Scanned::Cut`], `open_at_end` holds where the containers open at the chunk's end begin.
fn scan_container(bytes: &[u8], i: usize, room: usize, open_at_end: &mut Vec<usize>) -> Scanned {
    // Per open container (innermost last): where it begins and whether it is an object.
    let mut open: [(usize, bool); 32] = [(0, false); 32];
    let mut depth = 0;
    let mut next = Next::Value;
    let mut k = i;
    let cut = |open: &[(usize, bool)], open_at_end: &mut Vec<usize>| {
        open_at_end.clear();
        open_at_end.extend(open.iter().map(|&(at, _)| at));
        Scanned::Cut
    };
    loop {
        let Some(mut b) = bytes.get(k).copied() else {
            return cut(&open[..depth], open_at_end);
        };
        // Spaces are at most 0x20: one test passes the apiserver's compact JSON.
        if b <= b' ' {
            k = run_end(bytes, k, is_space);
            let Some(&next_byte) = bytes.get(k) else {
                return cut(&open[..depth], open_at_end);
            };
            b = next_byte;
        }
        match next {
            Next::FirstItem | Next::Value => match b {
                b'{' | b'[' => {
                    // Deeper than the local stack holds: left to the steps.
                    if depth == room || depth == open.len() {
                        return Scanned::Invalid(k);
                    }
                    open[depth] = (k, b == b'{');
                    depth += 1;
                    next = if b == b'{' {
                        Next::FirstName
                    } else {
                        Next::FirstItem
                    };
                    k += 1;
                    continue;
                }
                b']' if next == Next::FirstItem => {}
                b'"' => {
                    match scan_string(bytes, k + 1) {
                        Scanned::Whole(end) => k = end,
                        Scanned::Cut => return cut(&open[..depth], open_at_end),
                        invalid => return invalid,
                    }
                    next = Next::After;
                    continue;
                }
                b'-' | b'0'..=b'9' => {
                    let mut num = if b == b'-' {
                        Num::Minus
                    } else if b == b'0' {
                        Num::Zero
                    } else {
                        Num::Int
                    };
                    k += 1;
                    loop {
                        k = match num {
                            Num::Int | Num::Frac | Num::ExpInt => {
                                run_end(bytes, k, |c| c.is_ascii_digit())
                            }
                            _ => k,
                        };
                        let Some(&c) = bytes.get(k) else {
                            return cut(&open[..depth], open_at_end);
                        };
                        match num.step(c) {
                            Some(n) => {
                                num = n;
                                k += 1;
                            }
                            None if num.can_end() => break,
                            None => return Scanned::Invalid(k),
                        }
                    }
                    next = Next::After;
                    continue;
                }
                b't' | b'f' | b'n' => {
                    let word: &[u8] = match b {
                        b't' => b"true",
                        b'f' => b"false",
                        _ => b"null",
                    };
                    let have = &bytes[k..bytes.len().min(k + word.len())];
                    if !word.starts_with(have) {
                        return Scanned::Invalid(k);
                    }
                    if have.len() < word.len() {
                        return cut(&open[..depth], open_at_end);
                    }
                    k += word.len();
                    next = Next::After;
                    continue;
                }
                _ => return Scanned::Invalid(k),
            },
            Next::FirstName | Next::Name => match b {
                b'"' => {
                    match scan_string(bytes, k + 1) {
                        Scanned::Whole(end) => k = end,
                        Scanned::Cut => return cut(&open[..depth], open_at_end),
                        invalid => return invalid,
                    }
                    next = Next::Colon;
                    continue;
                }
                b'}' if next == Next::FirstName => {}
                _ => return Scanned::Invalid(k),
            },
            Next::Colon if b == b':' => {
                next = Next::Value;
                k += 1;
                continue;
            }
            Next::Colon => return Scanned::Invalid(k),
            Next::After => {
                let object = open[depth - 1].1;
                match b {
                    b',' => {
                        next = if object { Next::Name } else { Next::Value };
                        k += 1;
                        continue;
                    }
                    b'}' if object => {}
                    b']' if !object => {}
                    _ => return Scanned::Invalid(k),
                }
            }
        }
        // `bytes[k]` closes the innermost container.
        depth -= 1;
        k += 1;
        if depth == 0 {
            return Scanned::Whole(k);
        }
        next = Next::After;
    }
}

/// A string's content from `bytes[k]` (after its opening quote), as the steps check it:
/// where it ends (after its closing quote), or where it is invalid, or cut.
#[inline(always)]
fn scan_string(bytes: &[u8], mut k: usize) -> Scanned {
    loop {
        k = string_run_end(bytes, k);
        match bytes.get(k) {
            None => return Scanned::Cut,
            Some(b'"') => return Scanned::Whole(k + 1),
            Some(b'\\') => match bytes.get(k + 1) {
                None => return Scanned::Cut,
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => k += 2,
                Some(b'u') => {
                    for h in k + 2..k + 6 {
                        match bytes.get(h) {
                            None => return Scanned::Cut,
                            Some(c) if c.is_ascii_hexdigit() => {}
                            Some(_) => return Scanned::Invalid(h),
                        }
                    }
                    k += 6;
                }
                Some(_) => return Scanned::Invalid(k + 1),
            },
            Some(_) => return Scanned::Invalid(k),
        }
    }
}

/// Where the run of bytes from `bytes[i]` for which `keep` holds ends.
#[inline(always)]
fn run_end(bytes: &[u8], mut i: usize, keep: impl Fn(u8) -> bool) -> usize {
    while i < bytes.len() && keep(bytes[i]) {
        i += 1;
    }
    i
}

/// Cuts a JSON body, fed in arbitrary chunks, into [`Unit`]s.
pub(crate) struct JsonStream {
    shape: BodyShape,
    max_unit: usize,
    state: State,
    /// Open containers.
    depth: usize,
    /// One bit per open container, set for an object, clear for an array.
    objects: [u64; MAX_DEPTH / 64],
    /// What is being captured, and the depth of the value being captured.
    capture: Option<(Capture, usize)>,
    /// Where the capture's bytes begin in the current chunk.
    from: usize,
    /// The capture's bytes from earlier chunks.
    buf: Vec<u8>,
    /// The current top-level member name of a list.
    name: String,
    /// Inside the list's `items` array.
    in_items: bool,
    /// Bytes consumed before the current chunk.
    offset: u64,
    failed: Option<DecodeError>,
    finished: bool,
    /// What it locates in units; no paths, nothing located.
    locator: Locator,
    /// Containers of the current chunk not to take at once ([`JsonStream::take_container`]):
    /// those starting before this index (one held an error there)...
    no_take_before: usize,
    /// ...and those starting at these indices, ascending: open at the chunk's end.
    open_at_end: Vec<usize>,
    /// A list's one halt after a top-level member ([`JsonStream::halt_after_member`]).
    halt: Halt,
}

/// Where a list's halt after one of its members stands ([`JsonStream::halt_after_member`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Halt {
    /// None asked, or it is over: the run goes to the chunk's end.
    Off,
    /// To halt after the member of this name, if it comes before the items.
    Armed(&'static str),
    /// The member was handed out: the run stops after this step.
    Due,
    /// The run stopped with the chunk consumed up to this index, until taken.
    At(usize),
}

impl fmt::Debug for JsonStream {
    // The buffer may hold megabytes: show its length, not its bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JsonStream")
            .field("shape", &self.shape)
            .field("state", &self.state)
            .field("depth", &self.depth)
            .field("offset", &self.offset)
            .field("buffered", &self.buf.len())
            .field("failed", &self.failed)
            .finish_non_exhaustive()
    }
}

impl JsonStream {
    /// A decoder for a body of `shape` whose units are at most `max_unit_bytes` long.
    pub(crate) fn new(shape: BodyShape, max_unit_bytes: usize) -> Self {
        JsonStream {
            shape,
            max_unit: max_unit_bytes,
            state: State::Top,
            depth: 0,
            objects: [0; MAX_DEPTH / 64],
            capture: None,
            from: 0,
            buf: Vec::new(),
            name: String::new(),
            in_items: false,
            offset: 0,
            failed: None,
            finished: false,
            locator: Locator::default(),
            no_take_before: 0,
            open_at_end: Vec::new(),
            halt: Halt::Off,
        }
    }

    /// Makes the scan of a list stop once, right after handing out its top-level member
    /// `name` when that comes before the items and is an object (a list's `metadata`): the
    /// feed then returns with the rest of its chunk unconsumed ([`JsonStream::take_halt`]), so
    /// the caller may pass the rest on unscanned or feed it on as if nothing happened.
    pub(crate) fn halt_after_member(mut self, name: &'static str) -> Self {
        if self.shape == BodyShape::List {
            self.halt = Halt::Armed(name);
        }
        self
    }

    /// After a feed that halted: the index of its chunk the scan stopped at (what follows
    /// is unconsumed). Once.
    pub(crate) fn take_halt(&mut self) -> Option<usize> {
        match self.halt {
            Halt::At(at) => {
                self.halt = Halt::Off;
                Some(at)
            }
            _ => None,
        }
    }

    /// Locates the values at `paths` (at most [`MAX_PATHS`], each at most 3 names deep) in
    /// every object, list item or watch event, for [`JsonStream::feed_located`].
    pub(crate) fn locating(mut self, paths: &'static [Path]) -> Self {
        debug_assert!(paths.len() <= MAX_PATHS);
        debug_assert!(
            paths
                .iter()
                .all(|p| !p.is_empty() && p.len() < MAX_PATH_DEPTH)
        );
        self.locator.paths = &paths[..paths.len().min(MAX_PATHS)];
        self
    }

    /// Consumes the next chunk of the body, handing each unit it completes to `sink`.
    ///
    /// After an error the stream is dead: every later call returns the same error.
    #[cfg(test)]
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        sink: &mut dyn FnMut(Unit<'_>),
    ) -> Result<(), DecodeError> {
        self.feed_located(bytes, &mut |unit, _| sink(unit))
    }

    /// As [`JsonStream::feed`], handing each unit with what was located in it (see
    /// [`JsonStream::locating`]).
    pub(crate) fn feed_located(
        &mut self,
        bytes: &[u8],
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<(), DecodeError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if self.finished {
            return Err(self.fail(DecodeError::Syntax {
                offset: self.offset,
                what: "data after the end of the body",
            }));
        }
        match self.run(bytes, sink) {
            Ok(consumed) => {
                self.offset += consumed as u64;
                Ok(())
            }
            Err(err) => Err(self.fail(err)),
        }
    }

    /// Declares the end of the body: `Err(Truncated)` unless it ended at a clean boundary
    /// (after the document of an Object or List, between events of a watch stream).
    pub(crate) fn finish(&mut self) -> Result<(), DecodeError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        self.finished = true;
        let clean = match self.shape {
            BodyShape::WatchStream => self.state == State::Top,
            BodyShape::Object | BodyShape::List => self.state == State::Trailing,
        };
        if clean {
            Ok(())
        } else {
            Err(self.fail(DecodeError::Truncated))
        }
    }

    fn fail(&mut self, err: DecodeError) -> DecodeError {
        self.failed = Some(err.clone());
        self.capture = None;
        self.buf = Vec::new();
        err
    }

    fn syntax(&self, at: usize, what: &'static str) -> DecodeError {
        DecodeError::Syntax {
            offset: self.offset + at as u64,
            what,
        }
    }

    /// Fails once the capture, counted up to (not including) chunk index `at`, is too long.
    #[inline(always)]
    fn check_size(&self, at: usize) -> Result<(), DecodeError> {
        if self.capture.is_some() && self.buf.len() + (at - self.from) > self.max_unit {
            return Err(DecodeError::UnitTooLarge {
                limit: self.max_unit,
            });
        }
        Ok(())
    }

    /// The scanner over one chunk: each state's step returns where the next begins. Returns
    /// how much of the chunk it consumed: all of it, unless it halted.
    fn run(
        &mut self,
        bytes: &[u8],
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<usize, DecodeError> {
        self.from = 0;
        self.no_take_before = 0;
        self.open_at_end.clear();
        let mut i = 0;
        // An armed halt is watched for by a loop of its own: the items' loop stays as it was.
        while i < bytes.len() && matches!(self.halt, Halt::Armed(_) | Halt::Due) {
            self.check_size(i)?;
            i = self.step(bytes, i, sink)?;
            if self.halt == Halt::Due {
                // The member's capture was released with it: nothing of the chunk is held.
                self.halt = Halt::At(i);
                return Ok(i);
            }
        }
        while i < bytes.len() {
            self.check_size(i)?;
            i = self.step(bytes, i, sink)?;
        }
        self.check_size(bytes.len())?;
        if self.capture.is_some() {
            self.buf.extend_from_slice(&bytes[self.from..]);
        }
        Ok(bytes.len())
    }

    /// One step at `bytes[i]`: returns where the next begins.
    #[inline(always)]
    fn step(
        &mut self,
        bytes: &[u8],
        i: usize,
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<usize, DecodeError> {
        Ok(match self.state {
            State::Str { .. } | State::Escape { .. } | State::Hex { .. } => {
                self.in_string(bytes, i, sink)?
            }
            State::Number(_) | State::Literal(_) => self.in_scalar(bytes, i, sink)?,
            _ if is_space(bytes[i]) => run_end(bytes, i + 1, is_space),
            _ => self.structural(bytes, i, sink)?,
        })
    }

    /// One step inside a string (a member name or a value), at `bytes[i]`.
    #[inline]
    fn in_string(
        &mut self,
        bytes: &[u8],
        i: usize,
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<usize, DecodeError> {
        let b = bytes[i];
        match self.state {
            State::Str { name } => {
                // Most string bytes need no transition: skip to the next one that does.
                let end = string_run_end(bytes, i);
                if end > i {
                    return Ok(end);
                }
                match b {
                    // The colon nearly always follows at once: taken here (it cannot fail).
                    b'"' if name && bytes.get(i + 1) == Some(&b':') => {
                        self.end_name(i + 1, bytes)?;
                        self.state = State::Value;
                        return Ok(i + 2);
                    }
                    b'"' if name => self.end_name(i + 1, bytes)?,
                    b'"' => self.end_value(i + 1, bytes, sink)?,
                    b'\\' => self.state = State::Escape { name },
                    _ => return Err(self.syntax(i, "control character in a string")),
                }
            }
            State::Escape { name } => {
                self.state = match b {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => State::Str { name },
                    b'u' => State::Hex { name, left: 4 },
                    _ => return Err(self.syntax(i, "invalid escape in a string")),
                };
            }
            State::Hex { name, left } => {
                if !b.is_ascii_hexdigit() {
                    return Err(self.syntax(i, "invalid \\u escape in a string"));
                }
                self.state = if left == 1 {
                    State::Str { name }
                } else {
                    State::Hex {
                        name,
                        left: left - 1,
                    }
                };
            }
            _ => unreachable!("in_string is called only in a string state"),
        }
        Ok(i + 1)
    }

    /// One step inside a number or a literal (`true`, `false`, `null`), at `bytes[i]`.
    #[inline]
    fn in_scalar(
        &mut self,
        bytes: &[u8],
        i: usize,
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<usize, DecodeError> {
        let b = bytes[i];
        match self.state {
            // Digits after a digit leave the state as it is: take them as a run.
            State::Number(Num::Int | Num::Frac | Num::ExpInt) if b.is_ascii_digit() => {
                Ok(run_end(bytes, i + 1, |c| c.is_ascii_digit()))
            }
            State::Number(num) => match num.step(b) {
                Some(next) => {
                    self.state = State::Number(next);
                    Ok(i + 1)
                }
                // The number ended just before this byte, which is then read again.
                None if num.can_end() => {
                    self.end_value(i, bytes, sink)?;
                    Ok(i)
                }
                None => Err(self.syntax(i, "invalid number")),
            },
            // The rest of the literal whole in this chunk: taken at once.
            State::Literal(rest) if bytes[i..].starts_with(rest) => {
                self.end_value(i + rest.len(), bytes, sink)?;
                Ok(i + rest.len())
            }
            State::Literal(rest) => {
                if rest.first() != Some(&b) {
                    return Err(self.syntax(i, "invalid literal"));
                }
                if rest.len() == 1 {
                    self.end_value(i + 1, bytes, sink)?;
                } else {
                    self.state = State::Literal(&rest[1..]);
                }
                Ok(i + 1)
            }
            _ => unreachable!("in_scalar is called only in a number or a literal"),
        }
    }

    /// One step between values: a value's start, a member name's, `:`, `,`, a closing
    /// bracket, at `bytes[i]` (not a space).
    #[inline]
    fn structural(
        &mut self,
        bytes: &[u8],
        i: usize,
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<usize, DecodeError> {
        let b = bytes[i];
        if matches!(b, b'{' | b'[')
            && matches!(self.state, State::Value | State::ArrayStart)
            && let Some(end) = self.take_container(bytes, i)
        {
            return Ok(end);
        }
        match self.state {
            // A string's content is taken at once from here (it cannot fail or end a unit
            // before its closing quote, which the next step reads).
            State::Top | State::Value if b == b'"' => {
                self.start_value(b, i)?;
                return Ok(string_run_end(bytes, i + 1));
            }
            State::Top | State::Value => self.start_value(b, i)?,
            State::ArrayStart if b == b']' => self.close(false, i + 1, bytes, sink)?,
            State::ArrayStart => self.start_value(b, i)?,
            State::ObjectStart | State::Name => match b {
                b'"' => return Ok(self.start_name(bytes, i)),
                b'}' if self.state == State::ObjectStart => self.close(true, i + 1, bytes, sink)?,
                _ => return Err(self.syntax(i, "expected a member name")),
            },
            State::Colon => {
                if b != b':' {
                    return Err(self.syntax(i, "expected ':' after a member name"));
                }
                self.state = State::Value;
            }
            State::AfterValue => {
                let in_object = self.innermost_is_object();
                match b {
                    // A name nearly always follows at once: begun here (it cannot fail).
                    b',' if in_object && bytes.get(i + 1) == Some(&b'"') => {
                        return Ok(self.start_name(bytes, i + 1));
                    }
                    b',' if in_object => self.state = State::Name,
                    b',' => self.state = State::Value,
                    b'}' | b']' => {
                        if (b == b'}') != in_object {
                            return Err(self.syntax(i, "mismatched closing bracket"));
                        }
                        self.close(in_object, i + 1, bytes, sink)?;
                    }
                    _ => return Err(self.syntax(i, "expected ',' or a closing bracket")),
                }
            }
            State::Trailing => return Err(self.syntax(i, "data after the end of the document")),
            State::Str { .. }
            | State::Escape { .. }
            | State::Hex { .. }
            | State::Number(_)
            | State::Literal(_) => unreachable!("structural is called only between values"),
        }
        Ok(i + 1)
    }

    /// The container opening at `bytes[i]` taken whole at once, when nothing in it matters
    /// but its validity: it lies inside the unit being captured (it neither is one nor ends
    /// one), on no path being located, whole in this chunk, valid and not too deep. Returns
    /// where it ends; `None` leaves it to the steps, which then find exactly what the byte
    /// by byte scan finds (the error, the chunk's end).
    ///
    /// Issue 34: most of a pod is such containers (its spec, status and managed fields), and
    /// a step per token cost about 30 instructions a byte of a list of real pods.
    fn take_container(&mut self, bytes: &[u8], i: usize) -> Option<usize> {
        let inside = self.capture.is_some_and(|(_, d)| d < self.depth);
        if !inside || i < self.no_take_before || self.open_at_end.binary_search(&i).is_ok() {
            return None;
        }
        let unit_depth = self.unit_depth();
        let located = unit_depth.is_some_and(|d| d < MAX_PATH_DEPTH);
        if located && self.locator.pending.is_some() {
            return None;
        }
        match scan_container(bytes, i, MAX_DEPTH - self.depth, &mut self.open_at_end) {
            Scanned::Whole(end) => {
                // What the steps would leave: nothing located at this depth, nothing pending.
                self.locator.pending = None;
                if let Some(d) = unit_depth.filter(|_| located) {
                    self.locator.values[d] = None;
                    self.locator.objects[d] = None;
                }
                self.state = State::AfterValue;
                Some(end)
            }
            Scanned::Invalid(at) => {
                self.no_take_before = at;
                None
            }
            Scanned::Cut => None,
        }
    }

    /// A member name opens with the quote at `bytes[i]`: returns where its content ends
    /// (or the chunk does), taken at once.
    #[inline]
    fn start_name(&mut self, bytes: &[u8], i: usize) -> usize {
        if self.shape == BodyShape::List && self.depth == 1 {
            self.begin(Capture::Name, i);
        } else if self.unit_depth().is_some() {
            self.locator.name_from = self.unit_pos(i);
        }
        self.state = State::Str { name: true };
        string_run_end(bytes, i + 1)
    }

    #[inline(always)]
    fn innermost_is_object(&self) -> bool {
        let level = self.depth - 1;
        self.objects[level / 64] & (1 << (level % 64)) != 0
    }

    #[inline(always)]
    fn begin(&mut self, what: Capture, at: usize) {
        self.capture = Some((what, self.depth));
        self.from = at;
    }

    /// Byte `b` at chunk index `at` starts a value at the current depth.
    fn start_value(&mut self, b: u8, at: usize) -> Result<(), DecodeError> {
        if self.capture.is_none() {
            match (self.shape, self.depth) {
                (_, 0) if b != b'{' => {
                    return Err(self.syntax(at, "expected a JSON object"));
                }
                (BodyShape::Object, 0) => self.begin(Capture::Object, at),
                (BodyShape::WatchStream, 0) => self.begin(Capture::Event, at),
                (BodyShape::List, 1) if self.name == "items" => match b {
                    b'[' => {
                        self.in_items = true;
                        // Items before the member: no halt (nothing would come of it).
                        if let Halt::Armed(_) = self.halt {
                            self.halt = Halt::Off;
                        }
                    }
                    b'n' => {}
                    _ => return Err(self.syntax(at, "`items` is neither an array nor null")),
                },
                (BodyShape::List, 1) => self.begin(Capture::Member, at),
                (BodyShape::List, 2) if self.in_items => self.begin(Capture::Item, at),
                // The list object itself, which is not captured.
                _ => {}
            }
        }
        self.locate_start(b, at);
        self.state = match b {
            b'{' | b'[' => {
                if self.depth == MAX_DEPTH {
                    return Err(self.syntax(at, "nested deeper than 256 levels"));
                }
                let bit = 1 << (self.depth % 64);
                if b == b'{' {
                    self.objects[self.depth / 64] |= bit;
                } else {
                    self.objects[self.depth / 64] &= !bit;
                }
                self.depth += 1;
                if b == b'{' {
                    State::ObjectStart
                } else {
                    State::ArrayStart
                }
            }
            b'"' => State::Str { name: false },
            b'-' => State::Number(Num::Minus),
            b'0' => State::Number(Num::Zero),
            b'1'..=b'9' => State::Number(Num::Int),
            b't' => State::Literal(b"rue"),
            b'f' => State::Literal(b"alse"),
            b'n' => State::Literal(b"ull"),
            _ => return Err(self.syntax(at, "expected a JSON value")),
        };
        Ok(())
    }

    /// Closes the innermost container, whose last byte ends before chunk index `end`.
    fn close(
        &mut self,
        object: bool,
        end: usize,
        bytes: &[u8],
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<(), DecodeError> {
        debug_assert_eq!(object, self.innermost_is_object());
        self.depth -= 1;
        self.end_value(end, bytes, sink)
    }

    /// A value at the current depth ended just before chunk index `end`.
    fn end_value(
        &mut self,
        end: usize,
        bytes: &[u8],
        sink: &mut dyn FnMut(Unit<'_>, &Located),
    ) -> Result<(), DecodeError> {
        self.locate_end(end);
        if let Some((what, depth)) = self.capture.filter(|&(_, d)| d == self.depth) {
            debug_assert_eq!(depth, self.depth);
            self.check_size(end)?;
            let value: &[u8] = if self.buf.is_empty() {
                &bytes[self.from..end]
            } else {
                self.buf.extend_from_slice(&bytes[self.from..end]);
                &self.buf
            };
            let unit = match what {
                Capture::Object => Unit::Object(value),
                Capture::Member => Unit::ListMember {
                    key: &self.name,
                    value,
                },
                Capture::Item => Unit::ListItem(value),
                // Names end in `end_name`, never here.
                Capture::Event | Capture::Name => Unit::WatchEvent(value),
            };
            // An object member ends at its closing brace, which this step consumed last: the
            // halt leaves nothing of it half read.
            let halt = match (what, self.halt) {
                (Capture::Member, Halt::Armed(name)) => {
                    name == self.name && value.first() == Some(&b'{')
                }
                _ => false,
            };
            sink(unit, &self.locator.found);
            self.release();
            if halt {
                self.halt = Halt::Due;
            }
        }
        if self.shape == BodyShape::List && self.depth == 1 {
            // Whatever ended at depth 1 was a member's value, the items array included.
            self.in_items = false;
        }
        self.state = match (self.depth, self.shape) {
            (0, BodyShape::WatchStream) => State::Top,
            (0, _) => State::Trailing,
            _ => State::AfterValue,
        };
        Ok(())
    }

    /// A member name ended just before chunk index `end`; decode it if it is captured.
    fn end_name(&mut self, end: usize, bytes: &[u8]) -> Result<(), DecodeError> {
        self.state = State::Colon;
        self.locate_name(end, bytes);
        if !matches!(self.capture, Some((Capture::Name, _))) {
            return Ok(());
        }
        self.check_size(end)?;
        if !self.buf.is_empty() {
            self.buf.extend_from_slice(&bytes[self.from..end]);
        }
        let quoted: &[u8] = if self.buf.is_empty() {
            &bytes[self.from..end]
        } else {
            &self.buf
        };
        self.name.clear();
        let inner = &quoted[1..quoted.len() - 1];
        if inner.contains(&b'\\') {
            match serde_json::from_slice::<String>(quoted) {
                Ok(name) => self.name = name,
                Err(_) => return Err(self.syntax(end - 1, "invalid member name")),
            }
        } else {
            match std::str::from_utf8(inner) {
                Ok(name) => self.name.push_str(name),
                Err(_) => return Err(self.syntax(end - 1, "member name is not UTF-8")),
            }
        }
        self.release();
        Ok(())
    }

    /// The depth of the current value in the unit being captured (its root is 0), when
    /// there is one and paths to locate.
    #[inline(always)]
    fn unit_depth(&self) -> Option<usize> {
        if self.locator.paths.is_empty() {
            return None;
        }
        match self.capture {
            Some((Capture::Object | Capture::Item | Capture::Event, d)) => Some(self.depth - d),
            _ => None,
        }
    }

    /// The position in the unit being captured of chunk index `at`.
    #[inline(always)]
    fn unit_pos(&self, at: usize) -> usize {
        self.buf.len() + at - self.from
    }

    /// A value starts at chunk index `at` with byte `b`: note whether it lies on a path.
    fn locate_start(&mut self, b: u8, at: usize) {
        let pending = self.locator.pending.take();
        let Some(depth) = self.unit_depth().filter(|&d| d < MAX_PATH_DEPTH) else {
            return;
        };
        let node = if depth == 0 {
            self.locator.found = Located::default();
            Some((0, 0))
        } else {
            pending
        };
        let start = self.unit_pos(at);
        let locator = &mut self.locator;
        locator.values[depth] = node.filter(|_| depth > 0).map(|(q, len)| (q, len, start));
        locator.objects[depth] = node.filter(|_| b == b'{');
    }

    /// A member name ended just before chunk index `end`: does it lead along a path?
    fn locate_name(&mut self, end: usize, bytes: &[u8]) {
        self.locator.pending = None;
        let Some(depth) = self.unit_depth() else {
            return;
        };
        // The name of a member at depth d belongs to the object opened at depth d - 1.
        let Some(node) = depth
            .checked_sub(1)
            .and_then(|d| self.locator.objects.get(d).copied().flatten())
        else {
            return;
        };
        let (start, stop) = (self.locator.name_from + 1, self.unit_pos(end) - 1);
        let name: &[u8] = if start >= self.buf.len() {
            &bytes[self.from + start - self.buf.len()..end - 1]
        } else {
            // The name began in an earlier chunk: bring the unit's bytes together.
            self.buf.extend_from_slice(&bytes[self.from..end]);
            self.from = end;
            &self.buf[start..stop]
        };
        // Paths are plain ASCII names: an escaped or non-ASCII name might still spell one
        // (or be refused by a parser), so the consumer parses this unit itself.
        if !name.is_ascii() || name.contains(&b'\\') {
            self.locator.found.unsure = true;
            return;
        }
        self.locator.pending = self.locator.child(node, name);
    }

    /// A value ended just before chunk index `end`: if it is a path's, note its span.
    fn locate_end(&mut self, end: usize) {
        let Some(depth) = self.unit_depth() else {
            return;
        };
        let Some((q, len, start)) = self.locator.values.get_mut(depth).and_then(Option::take)
        else {
            return;
        };
        if usize::from(len) == self.locator.paths[usize::from(q)].len() {
            let stop = self.unit_pos(end);
            let found = &mut self.locator.found;
            // A member twice: a parser would refuse it or take the last; let it decide.
            found.unsure |= found.spans[usize::from(q)].is_some();
            found.spans[usize::from(q)] = Some((start, stop));
        }
    }

    fn release(&mut self) {
        self.capture = None;
        if self.buf.capacity() > KEEP_BUFFER_BYTES {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A unit as an owned value, to compare what different feedings produce.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Owned {
        Object(String),
        Member(String, String),
        Item(String),
        Event(String),
    }

    fn own(unit: Unit<'_>) -> Owned {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        match unit {
            Unit::Object(b) => Owned::Object(text(b)),
            Unit::ListMember { key, value } => Owned::Member(key.to_owned(), text(value)),
            Unit::ListItem(b) => Owned::Item(text(b)),
            Unit::WatchEvent(b) => Owned::Event(text(b)),
        }
    }

    /// Feeds `chunks` in order, then finishes; returns the units and the first error.
    fn decode_chunks<'a>(
        shape: BodyShape,
        max: usize,
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> (Vec<Owned>, Result<(), DecodeError>) {
        let mut units = Vec::new();
        let mut stream = JsonStream::new(shape, max);
        let mut sink = |u: Unit<'_>| units.push(own(u));
        let mut result = Ok(());
        for chunk in chunks {
            result = stream.feed(chunk, &mut sink);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = stream.finish();
        }
        (units, result)
    }

    fn decode(shape: BodyShape, body: &str) -> (Vec<Owned>, Result<(), DecodeError>) {
        decode_chunks(shape, 1 << 20, [body.as_bytes()])
    }

    /// Decodes `body` whole, byte by byte, and split at every point in two; all must agree.
    fn check(shape: BodyShape, body: &str, expected: &[Owned], result: Result<(), DecodeError>) {
        let bytes = body.as_bytes();
        let whole = decode(shape, body);
        assert_eq!(whole.0, expected, "units of {body:?}");
        assert_eq!(whole.1, result, "result of {body:?}");
        let singles = decode_chunks(shape, 1 << 20, bytes.chunks(1));
        assert_eq!(singles, whole, "1-byte chunks of {body:?}");
        for at in 0..=bytes.len() {
            let (a, b) = bytes.split_at(at);
            let split = decode_chunks(shape, 1 << 20, [a, b]);
            assert_eq!(split, whole, "{body:?} split at {at}");
        }
    }

    fn item(s: &str) -> Owned {
        Owned::Item(s.to_owned())
    }

    fn member(k: &str, v: &str) -> Owned {
        Owned::Member(k.to_owned(), v.to_owned())
    }

    fn event(s: &str) -> Owned {
        Owned::Event(s.to_owned())
    }

    fn syntax(offset: u64, what: &'static str) -> Result<(), DecodeError> {
        Err(DecodeError::Syntax { offset, what })
    }

    #[test]
    fn object_body_is_one_unit() {
        let body = r#"  {"kind":"Pod","metadata":{"name":"a"},"spec":{"x":[1,-2.5e3,true,null]}} "#;
        check(
            BodyShape::Object,
            body,
            &[Owned::Object(body.trim().to_owned())],
            Ok(()),
        );
        check(
            BodyShape::Object,
            "{}",
            &[Owned::Object("{}".into())],
            Ok(()),
        );
        check(
            BodyShape::Object,
            "\n{ }\r\n",
            &[Owned::Object("{ }".into())],
            Ok(()),
        );
    }

    #[test]
    fn list_body_yields_members_and_items() {
        let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"42"},"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]}"#;
        check(
            BodyShape::List,
            body,
            &[
                member("kind", r#""PodList""#),
                member("apiVersion", r#""v1""#),
                member("metadata", r#"{"resourceVersion":"42"}"#),
                item(r#"{"metadata":{"name":"a"}}"#),
                item(r#"{"metadata":{"name":"b"}}"#),
            ],
            Ok(()),
        );
    }

    #[test]
    fn list_items_before_kind_and_pretty_printed() {
        let body = "{\n  \"items\" : [\n    {\"a\": [[1, 2], [3, [4]]]} ,\n    {\"b\": {}}\n  ],\n  \"kind\": \"List\",\n  \"metadata\": {}\n}\n";
        check(
            BodyShape::List,
            body,
            &[
                item(r#"{"a": [[1, 2], [3, [4]]]}"#),
                item(r#"{"b": {}}"#),
                member("kind", r#""List""#),
                member("metadata", "{}"),
            ],
            Ok(()),
        );
    }

    #[test]
    fn empty_and_null_items() {
        for items in ["[]", "[ ]", "null"] {
            let body = format!(r#"{{"kind":"PodList","items":{items},"metadata":{{}}}}"#);
            check(
                BodyShape::List,
                &body,
                &[member("kind", r#""PodList""#), member("metadata", "{}")],
                Ok(()),
            );
        }
        check(BodyShape::List, "{}", &[], Ok(()));
    }

    #[test]
    fn list_items_of_any_json_value() {
        check(
            BodyShape::List,
            r#"{"items":[1,"two",[3],null,false,-0.5E+2,{}],"n":7}"#,
            &[
                item("1"),
                item(r#""two""#),
                item("[3]"),
                item("null"),
                item("false"),
                item("-0.5E+2"),
                item("{}"),
                member("n", "7"),
            ],
            Ok(()),
        );
    }

    #[test]
    fn escaped_member_names_are_decoded() {
        // `it\u0065ms` is `items`; the value is the items array, not a member.
        check(
            BodyShape::List,
            r#"{"it\u0065ms":[{}],"k\"ey":1,"é":2}"#,
            &[item("{}"), member("k\"ey", "1"), member("é", "2")],
            Ok(()),
        );
    }

    #[test]
    fn strings_with_brackets_quotes_and_escapes() {
        let tricky =
            r#"{"s":"{[}]\"\\","t":"\\\"]}","u":"\u00e9\uD83D\uDE00 é 😀","v":"\/\b\f\n\r\t"}"#;
        check(
            BodyShape::List,
            &format!(r#"{{"items":[{tricky},"}}]\\"],"kind":"{{\"\\"}}"#),
            &[
                item(tricky),
                item(r#""}]\\""#),
                member("kind", r#""{\"\\""#),
            ],
            Ok(()),
        );
        check(
            BodyShape::Object,
            tricky,
            &[Owned::Object(tricky.into())],
            Ok(()),
        );
    }

    /// The first `"`, `\\` or control character from `i`, one byte at a time.
    fn naive_run_end(bytes: &[u8], i: usize) -> usize {
        (i..bytes.len())
            .find(|&k| matches!(bytes[k], b'"' | b'\\' | 0..=0x1f))
            .unwrap_or(bytes.len())
    }

    #[test]
    fn string_runs_end_at_the_first_quote_backslash_or_control_character() {
        // Each stop, at each place in and across the 8-byte first word and the 32-byte blocks
        // past it, after plain bytes that come close to a stop in the word tests (0x20, 0x21,
        // 0x5b, 0x7f, 0x80, 0xa0, 0xff).
        let plain = [b'a', 0x20, 0x21, 0x5b, 0x5d, 0x7f, 0x80, 0xa0, 0xdc, 0xff];
        for stop in [b'"', b'\\', 0x00, 0x0a, 0x1f] {
            for at in 0..90 {
                for &filler in &plain {
                    let mut bytes = vec![filler; 100];
                    bytes[at] = stop;
                    for from in 0..=at {
                        assert_eq!(
                            string_run_end(&bytes, from),
                            at,
                            "stop {stop:#x} at {at} after {filler:#x} from {from}"
                        );
                    }
                }
            }
        }
        // No stop at all; the start at or past the end; a stop below another in one word.
        assert_eq!(string_run_end(&[0x20; 13], 0), 13);
        assert_eq!(string_run_end(b"abc", 3), 3);
        assert_eq!(string_run_end(b"abc", 7), 7);
        assert_eq!(string_run_end(b"ab\x01\"cdefgh", 0), 2);
        // Random bytes, biased towards the stops and their neighbours.
        let mut rng = Rng(0xC0FF_EE00_1234_5678);
        let pool = [
            b'"',
            b'\\',
            0x00,
            0x1f,
            0x20,
            0x21,
            0x22 ^ 0x80,
            0x5c ^ 0x80,
            0x9f,
            0xff,
        ];
        for _ in 0..5000 {
            let len = rng.below(160);
            let bytes: Vec<u8> = (0..len)
                .map(|_| match rng.below(4) {
                    0 => pool[rng.below(pool.len())],
                    _ => b'a' + (rng.below(26) as u8),
                })
                .collect();
            let from = rng.below(len + 1);
            assert_eq!(
                string_run_end(&bytes, from),
                naive_run_end(&bytes, from),
                "{bytes:?} from {from}"
            );
        }
    }

    #[test]
    fn long_runs_decode_alike_however_they_are_cut() {
        // Strings, numbers, literals and spaces long enough for the runs taken at once, with
        // escapes and multi-byte characters inside them (`check` cuts at every byte).
        let long = format!(
            r#"{{"s":"{a}\"{{}}[]\\{a}\u00e9\uD83D\uDE00 é 😀{a}","n":[12345678901234567890,-0.12345678e+10,0,1E-9],"l":[true,false,null],  "w" :{sp}{{ }}}}"#,
            a = "abcdefghij".repeat(3),
            sp = " \t\r\n".repeat(5)
        );
        check(
            BodyShape::List,
            &format!(r#"{{"items":[{long},{long}],"kind":"PodList"}}"#),
            &[item(&long), item(&long), member("kind", r#""PodList""#)],
            Ok(()),
        );
        check(
            BodyShape::Object,
            &long,
            &[Owned::Object(long.clone())],
            Ok(()),
        );
    }

    #[test]
    fn errors_inside_runs_are_found_at_the_same_byte() {
        // A control character deep in a long string, a bad escape after a run, a number
        // that breaks off in its digits or exponent, a literal wrong at its last byte.
        let run = "x".repeat(21);
        let cases: [(String, u64, &str); 8] = [
            (
                format!("{{\"a\":\"{run}\u{1f}\"}}"),
                27,
                "control character in a string",
            ),
            (
                format!("{{\"a\":\"{run}\n\"}}"),
                27,
                "control character in a string",
            ),
            (
                format!("{{\"a\":\"{run}\\x\"}}"),
                28,
                "invalid escape in a string",
            ),
            (
                format!("{{\"a\":\"{run}\\u12g4\"}}"),
                31,
                "invalid \\u escape in a string",
            ),
            (
                r#"{"a":1234567890x}"#.into(),
                15,
                "expected ',' or a closing bracket",
            ),
            (r#"{"a":12345e+x}"#.into(), 12, "invalid number"),
            (r#"{"a":123456.}"#.into(), 12, "invalid number"),
            (r#"{"a":[true,falsy]}"#.into(), 15, "invalid literal"),
        ];
        for (body, offset, what) in cases {
            check(BodyShape::Object, &body, &[], syntax(offset, what));
            // The same one level down, in a container taken at once when it is valid.
            let nested = format!(r#"{{"o":{body}}}"#);
            check(BodyShape::Object, &nested, &[], syntax(offset + 5, what));
        }
        // Cut inside each kind of run: truncated, whatever the cut.
        for body in [
            format!("{{\"a\":\"{run}"),
            r#"{"a":[123456789"#.into(),
            r#"{"a":[fals"#.into(),
            format!("{{\"a\":1{}", " ".repeat(20)),
        ] {
            check(BodyShape::Object, &body, &[], Err(DecodeError::Truncated));
            let nested = format!(r#"{{"o":[{body}"#);
            check(BodyShape::Object, &nested, &[], Err(DecodeError::Truncated));
        }
    }

    #[test]
    fn units_too_large_are_refused_inside_runs_whatever_the_cut() {
        // The limit falls inside a string, a number, a literal and spaces: the unit is refused
        // at the same point, whether the run is taken at once or byte by byte.
        for inner in [
            format!(r#""{}""#, "s".repeat(40)),
            "1".repeat(40),
            "[true,false,null,true,false,null,true]".into(),
            format!("[{}1]", " ".repeat(40)),
        ] {
            let body = format!(r#"{{"items":[{{"a":{inner}}},{{}}]}}"#);
            for max in [10, 20, 30, 6 + inner.len(), 7 + inner.len()] {
                let whole = decode_chunks(BodyShape::List, max, [body.as_bytes()]);
                let singles = decode_chunks(BodyShape::List, max, body.as_bytes().chunks(1));
                assert_eq!(whole, singles, "{body} at {max}");
                let fits = max >= 6 + inner.len();
                assert_eq!(whole.1.is_ok(), fits, "{body} at {max}: {whole:?}");
            }
        }
    }

    /// Decodes `body` as a list locating `paths`, fed in `chunks`: each unit with what was
    /// located in it.
    fn located_chunks<'a>(
        paths: &'static [Path],
        chunks: impl IntoIterator<Item = &'a [u8]>,
    ) -> (Vec<(Owned, Located)>, Result<(), DecodeError>) {
        let mut units = Vec::new();
        let mut stream = JsonStream::new(BodyShape::List, 1 << 20).locating(paths);
        let mut sink = |u: Unit<'_>, found: &Located| units.push((own(u), *found));
        let mut result = Ok(());
        for chunk in chunks {
            result = stream.feed_located(chunk, &mut sink);
            if result.is_err() {
                break;
            }
        }
        (units, result.and_then(|()| stream.finish()))
    }

    #[test]
    fn containers_taken_at_once_locate_the_same_whole_and_in_pieces() {
        // Paths beside, inside and after containers nothing is located in (taken at once):
        // the spans must be those the steps find, also one byte at a time.
        const PATHS: &[Path] = &[
            &["metadata", "name"],
            &["metadata", "resourceVersion"],
            &["spec", "nodeName"],
            &["kind"],
        ];
        let pod = |i: usize| {
            format!(
                r#"{{"metadata":{{"labels":{{"a":{{"b":[1,{{"c":"}}"}}]}}}},"name":"p{i}","managedFields":[{{"f:x":{{".":{{}}}}}}],"resourceVersion":"{i}"}},"spec":{{"volumes":[[],{{}},[null,true]],"nodeName":"n{i}","x":{{"nodeName":"not this"}}}},"status":{{"kind":"not this"}},"kind":"Pod"}}"#
            )
        };
        let body = format!(r#"{{"kind":"PodList","items":[{},{}]}}"#, pod(1), pod(22));
        let whole = located_chunks(PATHS, [body.as_bytes()]);
        assert_eq!(whole.1, Ok(()));
        assert_eq!(whole.0.len(), 3);
        for (unit, found) in &whole.0[1..] {
            let Owned::Item(text) = unit else {
                panic!("{unit:?} is not an item");
            };
            let at = |q: usize| {
                let (start, stop) = found.span(q).unwrap().unwrap();
                &text[start..stop]
            };
            assert!(
                at(0).starts_with("\"p") && at(2).starts_with("\"n"),
                "{text}"
            );
            assert_eq!(at(3), "\"Pod\"");
            let (name, rv) = (at(0), at(1));
            assert_eq!(&name[2..name.len() - 1], &rv[1..rv.len() - 1]);
        }
        assert_eq!(located_chunks(PATHS, body.as_bytes().chunks(1)), whole);
        for size in [2, 7, 33] {
            assert_eq!(located_chunks(PATHS, body.as_bytes().chunks(size)), whole);
        }
    }

    /// Realistic pod lists, damaged at random: decoding whole, one byte at a time and in
    /// random cuts gives the same units and the same error, at the same offset.
    #[test]
    fn damaged_lists_decode_alike_whole_and_in_pieces() {
        let pod = |i: usize| {
            format!(
                r#"{{"metadata":{{"name":"web-{i}","namespace":"ns","resourceVersion":"{i}","labels":{{"a":"b"}},"annotations":{{"pad":"{}"}}}},"spec":{{"nodeName":"n","containers":[{{"name":"c","ports":[{{"containerPort":8080}}],"env":[{{"name":"E","value":"q\"\\ \u00e9 é"}}]}}],"priority":-1.5e3,"hostNetwork":false,"x":null}}}}"#,
                "p".repeat(i * 7)
            )
        };
        let items: Vec<String> = (0..4).map(pod).collect();
        let seed = format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"9"}},"items":[{}]}}"#,
            items.join(",")
        );
        let alphabet = b"{}[]:,\"\\ 0123456789-+.eEtrufalsnp\x01\xc3\xa9";
        let mut rng = Rng(7);
        for round in 0..300 {
            let mut body = seed.clone().into_bytes();
            for _ in 0..round % 3 {
                let at = rng.below(body.len());
                match rng.below(3) {
                    0 => {
                        body.remove(at);
                    }
                    1 => body[at] = alphabet[rng.below(alphabet.len())],
                    _ => body.insert(at, alphabet[rng.below(alphabet.len())]),
                }
            }
            let max = [1 << 20, 300, 64][round % 3];
            let whole = decode_chunks(BodyShape::List, max, [body.as_slice()]);
            let singles = decode_chunks(BodyShape::List, max, body.chunks(1));
            assert_eq!(whole, singles, "1-byte chunks, round {round}");
            let mut cuts = Vec::new();
            let mut rest = body.as_slice();
            while !rest.is_empty() {
                let (a, b) = rest.split_at((1 + rng.below(40)).min(rest.len()));
                cuts.push(a);
                rest = b;
            }
            let cut = decode_chunks(BodyShape::List, max, cuts);
            assert_eq!(whole, cut, "random cuts, round {round}");
            if round % 3 == 0 {
                assert_eq!(whole.0.len(), 7, "the intact list's units");
            }
        }
    }

    #[test]
    fn watch_stream_yields_each_event() {
        let a = r#"{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a"}}}"#;
        let b = r#"{"type":"MODIFIED","object":{"s":"}\n{"}}"#;
        let body = format!("{a}\n{b}\n\n  {a}{b}");
        check(
            BodyShape::WatchStream,
            &body,
            &[event(a), event(b), event(a), event(b)],
            Ok(()),
        );
        check(BodyShape::WatchStream, "", &[], Ok(()));
        check(BodyShape::WatchStream, " \n", &[], Ok(()));
    }

    #[test]
    fn truncated_bodies_keep_what_was_emitted() {
        let a = r#"{"type":"ADDED","object":{}}"#;
        check(
            BodyShape::WatchStream,
            &format!("{a}\n{{\"type\":\"DEL"),
            &[event(a)],
            Err(DecodeError::Truncated),
        );
        check(
            BodyShape::List,
            r#"{"kind":"PodList","items":[{"a":1},{"b":"#,
            &[member("kind", r#""PodList""#), item(r#"{"a":1}"#)],
            Err(DecodeError::Truncated),
        );
        check(
            BodyShape::List,
            r#"{"items":[{"a":1}]"#,
            &[item(r#"{"a":1}"#)],
            Err(DecodeError::Truncated),
        );
        check(BodyShape::List, "", &[], Err(DecodeError::Truncated));
        check(BodyShape::Object, " ", &[], Err(DecodeError::Truncated));
        check(
            BodyShape::Object,
            r#"{"a":"b\"#,
            &[],
            Err(DecodeError::Truncated),
        );
        check(
            BodyShape::List,
            r#"{"n":12"#,
            &[],
            Err(DecodeError::Truncated),
        );
        check(
            BodyShape::List,
            r#"{"n":tr"#,
            &[],
            Err(DecodeError::Truncated),
        );
    }

    #[test]
    fn malformed_bodies_are_syntax_errors_at_the_offending_byte() {
        let cases: &[(BodyShape, &str, Result<(), DecodeError>)] = &[
            (BodyShape::Object, "[]", syntax(0, "expected a JSON object")),
            (
                BodyShape::Object,
                "  x",
                syntax(2, "expected a JSON object"),
            ),
            (
                BodyShape::Object,
                r#"{"a":1]"#,
                syntax(6, "mismatched closing bracket"),
            ),
            (
                BodyShape::Object,
                r#"{"a":[1}"#,
                syntax(7, "mismatched closing bracket"),
            ),
            (
                BodyShape::Object,
                r#"{"a" 1}"#,
                syntax(5, "expected ':' after a member name"),
            ),
            (
                BodyShape::Object,
                r#"{"a":1,}"#,
                syntax(7, "expected a member name"),
            ),
            (
                BodyShape::Object,
                r#"{,}"#,
                syntax(1, "expected a member name"),
            ),
            (
                BodyShape::Object,
                r#"{1:2}"#,
                syntax(1, "expected a member name"),
            ),
            (
                BodyShape::Object,
                r#"{"a":[1,]}"#,
                syntax(8, "expected a JSON value"),
            ),
            (
                BodyShape::Object,
                r#"{"a":[,]}"#,
                syntax(6, "expected a JSON value"),
            ),
            (
                BodyShape::Object,
                r#"{"a":1 2}"#,
                syntax(7, "expected ',' or a closing bracket"),
            ),
            (
                BodyShape::Object,
                r#"{"a":01}"#,
                syntax(6, "expected ',' or a closing bracket"),
            ),
            (BodyShape::Object, r#"{"a":-}"#, syntax(6, "invalid number")),
            (
                BodyShape::Object,
                r#"{"a":1.}"#,
                syntax(7, "invalid number"),
            ),
            (
                BodyShape::Object,
                r#"{"a":1e}"#,
                syntax(7, "invalid number"),
            ),
            (
                BodyShape::Object,
                r#"{"a":.5}"#,
                syntax(5, "expected a JSON value"),
            ),
            (
                BodyShape::Object,
                r#"{"a":tru}"#,
                syntax(8, "invalid literal"),
            ),
            (
                BodyShape::Object,
                r#"{"a":nul1}"#,
                syntax(8, "invalid literal"),
            ),
            (
                BodyShape::Object,
                r#"{"a":"\x"}"#,
                syntax(7, "invalid escape in a string"),
            ),
            (
                BodyShape::Object,
                r#"{"a":"\u12G4"}"#,
                syntax(10, "invalid \\u escape in a string"),
            ),
            (
                BodyShape::Object,
                "{\"a\":\"\n\"}",
                syntax(6, "control character in a string"),
            ),
            (
                BodyShape::List,
                r#"{"items":{}}"#,
                syntax(9, "`items` is neither an array nor null"),
            ),
            (
                BodyShape::List,
                r#"{"items":"x"}"#,
                syntax(9, "`items` is neither an array nor null"),
            ),
            (
                BodyShape::List,
                r#"[{"items":[]}]"#,
                syntax(0, "expected a JSON object"),
            ),
        ];
        for (shape, body, expected) in cases {
            check(*shape, body, &[], expected.clone());
        }
        // Units before the error stay emitted: the document is out before the trailing junk.
        check(
            BodyShape::Object,
            "{} {}",
            &[Owned::Object("{}".into())],
            syntax(3, "data after the end of the document"),
        );
        check(
            BodyShape::WatchStream,
            "{}\n[]",
            &[event("{}")],
            syntax(3, "expected a JSON object"),
        );
        check(
            BodyShape::WatchStream,
            "{}}",
            &[event("{}")],
            syntax(2, "expected a JSON object"),
        );
        check(
            BodyShape::Object,
            "{}x",
            &[Owned::Object("{}".into())],
            syntax(2, "data after the end of the document"),
        );
        check(
            BodyShape::List,
            r#"{"items":[{},{]}"#,
            &[item("{}")],
            syntax(14, "expected a member name"),
        );
        let err = DecodeError::Syntax {
            offset: 7,
            what: "invalid number",
        };
        assert_eq!(
            err.to_string(),
            "invalid JSON body at byte 7: invalid number"
        );
    }

    #[test]
    fn nesting_is_bounded() {
        let ok = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_DEPTH - 1),
            "]".repeat(MAX_DEPTH - 1)
        );
        let (units, result) = decode(BodyShape::Object, &ok);
        assert_eq!((units.len(), result), (1, Ok(())));
        let deep = format!("{{\"a\":{}", "[".repeat(MAX_DEPTH));
        let (units, result) = decode(BodyShape::Object, &deep);
        assert!(units.is_empty());
        assert_eq!(
            result,
            syntax(5 + MAX_DEPTH as u64 - 1, "nested deeper than 256 levels")
        );
    }

    #[test]
    fn errors_are_sticky() {
        let mut stream = JsonStream::new(BodyShape::Object, 100);
        let mut sink = |_: Unit<'_>| panic!("no unit expected");
        let first = stream.feed(b"]", &mut sink);
        assert_eq!(first, syntax(0, "expected a JSON object"));
        assert_eq!(stream.feed(b"{}", &mut sink), first);
        assert_eq!(stream.finish(), first);

        let mut stream = JsonStream::new(BodyShape::Object, 100);
        let mut units = 0;
        let mut count = |_: Unit<'_>| units += 1;
        stream.feed(b"{}", &mut count).unwrap();
        stream.finish().unwrap();
        assert_eq!(
            stream.feed(b"{}", &mut count),
            syntax(2, "data after the end of the body")
        );
        assert_eq!(units, 1);
    }

    #[test]
    fn units_larger_than_the_limit_are_refused() {
        let body = r#"{"items":[{"a":"123"},{"a":"1234"},{"b":1}]}"#;
        // `{"a":"123"}` is 11 bytes: allowed at 11, refused at 10, whatever the chunking.
        for max in [11, 10] {
            let whole = decode_chunks(BodyShape::List, max, [body.as_bytes()]);
            let singles = decode_chunks(BodyShape::List, max, body.as_bytes().chunks(1));
            assert_eq!(whole, singles, "max {max}");
            if max == 11 {
                assert_eq!(whole.0, [item(r#"{"a":"123"}"#)]);
            } else {
                assert!(whole.0.is_empty());
            }
            assert_eq!(whole.1, Err(DecodeError::UnitTooLarge { limit: max }));
        }
        // Member names count against the limit too.
        let long_name = format!(r#"{{"{}":1}}"#, "k".repeat(20));
        let (_, result) = decode_chunks(BodyShape::List, 10, [long_name.as_bytes()]);
        assert_eq!(result, Err(DecodeError::UnitTooLarge { limit: 10 }));
        // A unit of exactly the limit passes, also as an Object.
        let (units, result) = decode_chunks(BodyShape::Object, 2, [b"{}".as_slice()]);
        assert_eq!((units.len(), result), (1, Ok(())));
        let (_, result) = decode_chunks(BodyShape::Object, 1, [b"{}".as_slice()]);
        assert_eq!(result, Err(DecodeError::UnitTooLarge { limit: 1 }));
    }

    #[test]
    fn big_list_streams_with_bounded_buffer() {
        // 2,000 items of ~1 KiB fed in 4 KiB chunks: the buffer only ever holds one item.
        let item_text = format!(
            r#"{{"metadata":{{"name":"x"}},"data":"{}"}}"#,
            "z".repeat(1000)
        );
        let mut body = String::from(r#"{"kind":"ConfigMapList","items":["#);
        for i in 0..2000 {
            if i > 0 {
                body.push(',');
            }
            body.push_str(&item_text);
        }
        body.push_str("]}");
        let mut stream = JsonStream::new(BodyShape::List, 2048);
        let mut items = 0;
        let mut sink = |u: Unit<'_>| {
            if let Unit::ListItem(b) = u {
                assert_eq!(b, item_text.as_bytes());
                items += 1;
            }
        };
        for chunk in body.as_bytes().chunks(4096) {
            stream.feed(chunk, &mut sink).unwrap();
            assert!(stream.buf.len() <= 2048);
        }
        stream.finish().unwrap();
        assert_eq!(items, 2000);
    }

    #[test]
    fn huge_unit_buffer_is_released() {
        let big = format!(r#"{{"items":[{{"a":"{}"}},{{}}]}}"#, "x".repeat(2 << 20));
        let mut stream = JsonStream::new(BodyShape::List, 4 << 20);
        let mut units = Vec::new();
        let mut sink = |u: Unit<'_>| units.push(own(u));
        for chunk in big.as_bytes().chunks(64 * 1024) {
            stream.feed(chunk, &mut sink).unwrap();
        }
        stream.finish().unwrap();
        assert_eq!(units.len(), 2);
        assert!(stream.buf.capacity() <= KEEP_BUFFER_BYTES);
    }

    /// A deterministic xorshift generator, so failures replay.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..2000 {
            let len = rng.below(64);
            let body: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            for shape in [BodyShape::Object, BodyShape::List, BodyShape::WatchStream] {
                let chunk = 1 + round % 7;
                let _ = decode_chunks(shape, 32, body.chunks(chunk));
                let mut gz = BodyDecoder::new(shape, true, 32);
                let _ = gz.feed(&body, &mut |_| {});
                let _ = gz.finish(&mut |_| {});
            }
        }
        // Damaged gzip, fed in odd chunks: an error, or (a flip in an unchecked header field or
        // in padding bits) exactly the undamaged units.
        let compressed = gzip(sample_list(20).as_bytes());
        let intact = decode_body(BodyShape::List, true, [compressed.clone()]);
        let mut refused = 0;
        for _ in 0..500 {
            let mut damaged = compressed.clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(damaged.len());
                damaged[at] ^= 1 << rng.below(8);
            }
            let chunk = 1 + rng.below(40);
            let chunks = damaged.chunks(chunk).map(<[u8]>::to_vec);
            let decoded = decode_body(BodyShape::List, true, chunks);
            if decoded.1.is_ok() {
                assert_eq!(decoded, intact, "damage passed the checksum");
            } else {
                refused += 1;
            }
        }
        assert!(
            refused > 400,
            "only {refused} of 500 damaged bodies refused"
        );
    }

    /// Whether serde_json reads `body` as a JSON object; None when it refuses a number that
    /// is grammatical but out of f64 range (such as 1e999), which this decoder accepts.
    fn serde_verdict(body: &[u8]) -> Option<bool> {
        match serde_json::from_slice::<serde_json::Value>(body) {
            Ok(value) => Some(value.is_object()),
            Err(err) if err.to_string().contains("number out of range") => None,
            Err(_) => Some(false),
        }
    }

    /// Mutated valid JSON: our verdict on an Object body must be serde_json's, and every unit
    /// we emit must parse.
    #[test]
    fn mutated_json_agrees_with_serde_json() {
        let seed = br#"{"kind":"PodList","items":[{"a":[1,-2.5e+3,{"b":"c\"d\\"}],"t":true},null,"s"],"m":{"x":false,"y":0.5E1}}"#;
        let alphabet = b"{}[]:,\"\\ 0123456789-+.eEtrufalsn\n";
        let mut rng = Rng(42);
        let mut agreed_ok = 0;
        for _ in 0..20_000 {
            let mut body = seed.to_vec();
            for _ in 0..1 + rng.below(3) {
                let at = rng.below(body.len() + 1);
                match rng.below(3) {
                    0 if at < body.len() => {
                        body.remove(at);
                    }
                    1 if at < body.len() => body[at] = alphabet[rng.below(alphabet.len())],
                    _ => body.insert(at, alphabet[rng.below(alphabet.len())]),
                }
            }
            let ours = decode_chunks(BodyShape::Object, 1 << 20, [body.as_slice()]);
            let Some(theirs_ok) = serde_verdict(&body) else {
                continue;
            };
            assert_eq!(
                ours.1.is_ok(),
                theirs_ok,
                "verdicts differ on {:?}: ours {:?}",
                String::from_utf8_lossy(&body),
                ours.1,
            );
            agreed_ok += usize::from(theirs_ok);
            for shape in [BodyShape::List, BodyShape::WatchStream] {
                for unit in decode_chunks(shape, 1 << 20, body.chunks(5)).0 {
                    let raw = match &unit {
                        Owned::Member(_, v) => v,
                        Owned::Item(v) | Owned::Event(v) | Owned::Object(v) => v,
                    };
                    assert!(
                        serde_verdict(raw.as_bytes()).is_some(),
                        "unit {unit:?} of {:?} does not parse",
                        String::from_utf8_lossy(&body)
                    );
                }
            }
        }
        // The mutations must leave a fair share of valid documents, or the test proves little.
        assert!(agreed_ok > 1000, "only {agreed_ok} valid mutants");
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn decode_body(
        shape: BodyShape,
        gz: bool,
        chunks: impl IntoIterator<Item = Vec<u8>>,
    ) -> (Vec<Owned>, Result<(), DecodeError>) {
        let mut units = Vec::new();
        let mut decoder = BodyDecoder::new(shape, gz, 1 << 20);
        let mut sink = |u: Unit<'_>| units.push(own(u));
        let mut result = Ok(());
        for chunk in chunks {
            result = decoder.feed(&chunk, &mut sink);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = decoder.finish(&mut sink);
        }
        (units, result)
    }

    fn sample_list(n: usize) -> String {
        let items: Vec<String> = (0..n)
            .map(|i| format!(r#"{{"metadata":{{"name":"pod-{i}","labels":{{"app":"web"}}}}}}"#))
            .collect();
        format!(
            r#"{{"kind":"PodList","apiVersion":"v1","metadata":{{"resourceVersion":"7"}},"items":[{}]}}"#,
            items.join(",")
        )
    }

    #[test]
    fn gzip_body_in_small_chunks_decodes_to_the_same_units() {
        let body = sample_list(500);
        let plain = decode_body(BodyShape::List, false, [body.as_bytes().to_vec()]);
        assert_eq!(plain.1, Ok(()));
        assert_eq!(plain.0.len(), 503);
        let compressed = gzip(body.as_bytes());
        for size in [1, 3, 100, 4096, compressed.len()] {
            let chunks = compressed.chunks(size).map(<[u8]>::to_vec);
            assert_eq!(
                decode_body(BodyShape::List, true, chunks),
                plain,
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn gzip_watch_events_come_out_without_waiting_for_the_next_chunk() {
        let a = r#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}"#;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(format!("{a}\n").as_bytes()).unwrap();
        encoder.flush().unwrap();
        let first = encoder.get_ref().len();
        encoder.write_all(format!("{a}\n").as_bytes()).unwrap();
        let compressed = encoder.finish().unwrap();

        let mut decoder = BodyDecoder::new(BodyShape::WatchStream, true, 1 << 20);
        let mut units = Vec::new();
        decoder
            .feed(&compressed[..first], &mut |u| units.push(own(u)))
            .unwrap();
        assert_eq!(units, [event(a)]);
        decoder
            .feed(&compressed[first..], &mut |u| units.push(own(u)))
            .unwrap();
        decoder.finish(&mut |u| units.push(own(u))).unwrap();
        assert_eq!(units, [event(a), event(a)]);
    }

    #[test]
    fn gzip_damage_is_reported() {
        let body = sample_list(50);
        let compressed = gzip(body.as_bytes());

        // Cut short: the units before the cut are out, then the body is truncated.
        let cut = compressed[..compressed.len() / 2].to_vec();
        let (units, result) = decode_body(BodyShape::List, true, [cut]);
        assert!(!units.is_empty() && units.len() < 53);
        assert_eq!(result, Err(DecodeError::Truncated));

        // Not gzip at all.
        let (_, result) = decode_body(BodyShape::List, true, [body.as_bytes().to_vec()]);
        assert!(matches!(result, Err(DecodeError::Gzip(_))), "{result:?}");

        // A flipped bit in the trailer's checksum.
        let mut bad_crc = compressed.clone();
        let at = bad_crc.len() - 6;
        bad_crc[at] ^= 1;
        let (units, result) = decode_body(BodyShape::List, true, [bad_crc]);
        assert_eq!(units.len(), 53);
        assert!(matches!(result, Err(DecodeError::Gzip(_))), "{result:?}");

        // Bytes after the gzip stream.
        let mut trailing = compressed.clone();
        trailing.extend_from_slice(b"garbage!!");
        let (_, result) = decode_body(BodyShape::List, true, [trailing]);
        assert!(matches!(result, Err(DecodeError::Gzip(_))), "{result:?}");

        // An empty body.
        let (_, result) = decode_body(BodyShape::Object, true, Vec::<Vec<u8>>::new());
        assert_eq!(result, Err(DecodeError::Truncated));

        // Valid gzip around invalid JSON is a syntax error.
        let (_, result) = decode_body(BodyShape::Object, true, [gzip(b"[1]")]);
        assert_eq!(result, syntax(0, "expected a JSON object"));
    }

    #[test]
    fn plain_body_decoder_passes_through() {
        let body = r#"{"kind":"Pod"}"#;
        let (units, result) = decode_body(
            BodyShape::Object,
            false,
            body.as_bytes().chunks(2).map(<[u8]>::to_vec),
        );
        assert_eq!((units, result), (vec![Owned::Object(body.into())], Ok(())));
        assert_eq!(
            DecodeError::UnitTooLarge { limit: 5 }.to_string(),
            "an object in the body is larger than the 5 byte limit"
        );
    }
}

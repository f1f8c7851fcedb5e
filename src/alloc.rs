//! The hub's own memory accounting: a global allocator that counts live heap bytes and their
//! peak, shown in `/metrics`. It is how the hub's memory is measured under an emulator
//! (qemu-user's RSS includes its translated-code cache) and it tells an operator on a router
//! what the hub itself holds, apart from code and stacks.
//!
//! And the stack pages a thread no longer uses ([`trim_stack`]): a connection thread that
//! opened a watch went deep once (the TLS handshake: certificate checks, the client key's
//! signature) and then waits for events far higher up; the pages it touched on the way down
//! stay resident for as long as the watch lasts, 64 KiB of each 256 KiB stack, unless given
//! back.
//!
//! And work done once before such a wait ([`apart`]): glibc keeps up to seven freed chunks of
//! each small size in a cache of the thread that freed them, for that thread only, for its
//! life. A watch's TLS handshake left about 8.5 KiB of them with the watch's thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counted.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

impl Counting {
    /// Heap bytes allocated and not yet freed.
    pub(crate) fn live() -> usize {
        LIVE.load(Ordering::Relaxed)
    }

    /// The highest `live` seen.
    pub(crate) fn peak() -> usize {
        PEAK.load(Ordering::Relaxed)
    }

    fn grew(by: usize) {
        let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
        // Relaxed is enough: the peak is a statistic, not a synchronisation point.
        PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged and only
// updates counters; the layout contracts are the caller's, exactly as for `System`.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            Counting::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            Counting::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is (see the impl).
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is (see the impl).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                Counting::grew(new_size - layout.size());
            } else {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

/// Most malloc arenas glibc may make (it makes up to eight per core, one for each thread
/// that finds the others busy). Every arena keeps its own free memory: with a thread per
/// connection, 100 watches after a burst of events held 41 MiB with the default, 37 MiB with
/// two arenas and 32 MiB with one (measured before the watches' own buffers were cut; since,
/// 33 and 32 MiB). Two keep most of that and leave the request threads a second lock.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MALLOC_ARENAS: i32 = 2;

/// Caps glibc's malloc arenas at [`MALLOC_ARENAS`], unless `MALLOC_ARENA_MAX` in the
/// environment says otherwise; nothing on other C libraries (musl has a single heap). Call
/// before any thread starts.
pub fn few_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a tunable of the allocator; called at start, before
        // any thread could allocate concurrently.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, MALLOC_ARENAS);
        }
    }
}

/// What [`trim_stack`] keeps below its own frame: the libc wrapper's frame while the system
/// call runs (a few words). Whole pages are given back: a margin of a page kept one page
/// more than needed on most calls (the page below the caller's, which the wait that follows
/// seldom reaches: 4 KiB of every idle watch).
const TRIM_MARGIN: usize = 512;

thread_local! {
    /// The lowest address of this thread's stack (0: not asked yet; 1: unknown).
    static STACK_LOW: Cell<usize> = const { Cell::new(0) };
}

/// Gives the kernel back the pages of this thread's stack below the caller's frame (less
/// [`TRIM_MARGIN`]): what deeper calls touched before stays resident otherwise, however
/// long the thread then waits. The pages come back zeroed when next used, so a long wait
/// (a stream's reads) holds only what its own calls touch. One system call; for threads
/// whose stack this process made: on the main thread it does nothing (see [`stack_low`]).
#[inline(never)]
pub fn trim_stack() {
    let here = 0u8;
    let sp = std::hint::black_box(&here) as *const u8 as usize;
    let low = STACK_LOW.with(|c| {
        if c.get() == 0 {
            c.set(if main_thread() {
                1
            } else {
                stack_low().unwrap_or(1)
            });
        }
        c.get()
    });
    if low <= 1 {
        return;
    }
    let page = page_size();
    // The lowest page is left alone: it may be the guard.
    let bottom = (low + 2 * page - 1) & !(page - 1);
    let top = sp.saturating_sub(TRIM_MARGIN) & !(page - 1);
    if top > bottom {
        // SAFETY: [bottom, top) lies within this thread's own stack mapping (from
        // pthread_getattr_np) and below the frames live now (the caller's and this one's,
        // and the margin for the call below): nothing there is in use, and the kernel maps
        // zeroed pages there again when the stack next grows.
        #[allow(unsafe_code)]
        unsafe {
            libc::madvise(
                bottom as *mut libc::c_void,
                top - bottom,
                libc::MADV_DONTNEED,
            );
        }
    }
}

/// Whether the caller is the process's main thread. Its stack grows on demand, and what
/// glibc reports as its bounds is made up from the stack's size limit at start, not the
/// mapping: the range below the caller could then hold another mapping, which
/// `MADV_DONTNEED` would zero. A raw system call: musl's `gettid` wrapper is recent.
#[allow(unsafe_code)]
fn main_thread() -> bool {
    // SAFETY: gettid and getpid take no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) == libc::c_long::from(libc::getpid()) }
}

/// The lowest address of the calling thread's stack mapping (not to be asked on the main
/// thread, see [`main_thread`]).
#[allow(unsafe_code)]
fn stack_low() -> Option<usize> {
    let mut attr = std::mem::MaybeUninit::<libc::pthread_attr_t>::uninit();
    // SAFETY: the attribute object is initialised by pthread_getattr_np before it is read,
    // and destroyed once, after its stack was read.
    unsafe {
        if libc::pthread_getattr_np(libc::pthread_self(), attr.as_mut_ptr()) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let read = libc::pthread_attr_getstack(attr.as_ptr(), &mut addr, &mut size);
        libc::pthread_attr_destroy(attr.as_mut_ptr());
        (read == 0 && !addr.is_null()).then_some(addr as usize)
    }
}

/// The system's page size.
fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf only reads a system setting.
            #[allow(unsafe_code)]
            let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let size = usize::try_from(size)
                .ok()
                .filter(|s| s.is_power_of_two())
                .unwrap_or(4096);
            PAGE.store(size, Ordering::Relaxed);
            size
        }
        size => size,
    }
}

/// Runs `work` on a short-lived thread of its own and waits for it: the heap it frees (glibc's
/// per-thread cache of freed chunks) and the stack it touches go with that thread, instead of
/// staying with the caller, which is about to wait long (a watch's TLS handshake). The thread
/// costs a spawn (tens of µs; the work is a handshake's round trips). On the caller's thread
/// when no thread can be made.
pub(crate) fn apart<R: Send>(name: &str, work: impl FnOnce() -> R + Send) -> R {
    let mut work = Some(work);
    let done = std::thread::scope(|scope| {
        let slot = &mut work;
        let spawned = std::thread::Builder::new()
            .name(name.to_owned())
            .stack_size(crate::SMALL_STACK)
            .spawn_scoped(scope, move || slot.take().map(|work| work()));
        match spawned.map(|thread| thread.join()) {
            Ok(Ok(done)) => done,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            // Not spawned: the closure, and with it the borrow of `work`, is gone untouched.
            Err(_) => None,
        }
    });
    match done {
        Some(done) => done,
        // No thread was made: the work is still in its slot (a thread takes it, runs it and
        // returns what it made, or panicked above).
        None => work.expect("work no thread took")(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deep enough to touch many pages, and not optimised away.
    #[inline(never)]
    fn deep(n: usize) -> u8 {
        let mut pad = [0u8; 1024];
        pad[n % 1024] = n as u8;
        let below = if n > 0 { deep(n - 1) } else { 0 };
        std::hint::black_box(&mut pad)[0].wrapping_add(below)
    }

    /// Resident pages of the mapping holding `addr`, from /proc/self/smaps.
    fn resident_kib_around(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ')
                && let Some((lo, hi)) = range.split_once('-')
                && let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = (lo..hi).contains(&addr);
                continue;
            }
            if inside && let Some(rss) = line.strip_prefix("Rss:") {
                return rss.trim().trim_end_matches(" kB").trim().parse().unwrap();
            }
        }
        panic!("no mapping holds {addr:#x}");
    }

    #[test]
    fn work_apart_runs_on_a_thread_of_its_own_with_the_callers_borrows() {
        let caller = std::thread::current().id();
        let lent = vec![1u32, 2, 3];
        let (ran_on, name, sum) = apart("apart-test", || {
            let me = std::thread::current();
            (
                me.id(),
                me.name().map(str::to_owned),
                lent.iter().sum::<u32>(),
            )
        });
        assert_ne!(ran_on, caller, "the work ran on the caller's thread");
        assert_eq!(name.as_deref(), Some("apart-test"));
        assert_eq!(sum, 6);
        assert_eq!(lent, [1, 2, 3], "the caller's value is still its own");
    }

    #[test]
    fn a_trimmed_stack_gives_back_what_deeper_calls_touched_and_still_works() {
        let t = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(|| {
                let here = 0u8;
                let addr = std::hint::black_box(&here) as *const u8 as usize;
                // ~200 KiB deep, then back up.
                std::hint::black_box(deep(200));
                let before = resident_kib_around(addr);
                trim_stack();
                let after = resident_kib_around(addr);
                // Deep again after the trim: the pages come back, zeroed, and work.
                let again = deep(200);
                (before, after, again)
            })
            .unwrap();
        let (before, after, again) = t.join().unwrap();
        assert!(
            before >= 200,
            "the deep calls touched their pages: {before} KiB"
        );
        assert!(
            after + 150 <= before,
            "the trim gave them back: {before} KiB before, {after} KiB after"
        );
        assert_eq!(again, deep_expected());
    }

    fn deep_expected() -> u8 {
        std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(|| deep(200))
            .unwrap()
            .join()
            .unwrap()
    }
}

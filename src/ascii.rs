//! ASCII on the hot path: header names, tokens and path segments are compared and cut
//! dozens of times per request, and the hub is built at opt-level z, where std's byte loops
//! cost several times what memchr or a word at a time do.

/// `s.split(sep as char)` for an ASCII `sep`, each cut found by memchr: str's split sets up
/// a char searcher and, built into the hub at opt-level z, cost twice as much on a path.
pub(crate) fn split_ascii(s: &str, sep: u8) -> impl Iterator<Item = &str> {
    debug_assert!(
        sep.is_ascii(),
        "a cut at a non-ASCII byte could split a character"
    );
    let mut rest = Some(s);
    std::iter::from_fn(move || {
        let s = rest?;
        match memchr::memchr(sep, s.as_bytes()) {
            Some(i) => {
                // An ASCII byte: both sides of it are character boundaries.
                rest = Some(&s[i + 1..]);
                Some(&s[..i])
            }
            None => {
                rest = None;
                Some(s)
            }
        }
    })
}

/// The product of a `User-Agent` value: up to its first `/`, trimmed (`kubelet` of
/// `kubelet/v1.30.0 (linux/arm64) kubernetes/abc`).
pub(crate) fn user_agent_product(user_agent: &str) -> &str {
    split_ascii(user_agent, b'/')
        .next()
        .unwrap_or_default()
        .trim()
}

/// `a.eq_ignore_ascii_case(b)`, eight bytes at a time: header names and tokens are compared
/// dozens of times per request, and std's byte loop, built into the hub at opt-level z,
/// took about twenty instructions a byte.
pub(crate) fn eq_ignore_ascii_case(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let ((words_a, rest_a), (words_b, rest_b)) = (a.as_chunks::<8>(), b.as_chunks::<8>());
    words_a.iter().zip(words_b).all(|(x, y)| {
        lowercase_word(u64::from_le_bytes(*x)) == lowercase_word(u64::from_le_bytes(*y))
    }) && rest_a
        .iter()
        .zip(rest_b)
        .all(|(x, y)| x.eq_ignore_ascii_case(y))
}

/// Each byte of `w` lowercased when it is an ASCII capital, the others as they are.
fn lowercase_word(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = ONES * 0x80;
    // Per byte, on its low seven bits (no carry reaches the next byte): the high bit set
    // when it is at least 'A', and when it is past 'Z'.
    let low = w & !HIGH;
    let from_a = low + ONES * (0x80 - b'A' as u64);
    let past_z = low + ONES * (0x80 - b'Z' as u64 - 1);
    // A capital: from 'A', not past 'Z', and no high bit of its own (no ASCII then).
    let capitals = from_a & !past_z & !w & HIGH;
    w | (capitals >> 2)
}

#[cfg(test)]
mod tests {
    use super::eq_ignore_ascii_case;

    #[test]
    fn eight_at_a_time_agrees_with_std() {
        // The letters' neighbours in ASCII ('@' '[' '`' '{'), multi-byte characters, and
        // lengths across the eight-byte words.
        let alphabet = [
            'A', 'Z', 'a', 'z', '@', '[', '`', '{', '-', '0', 'é', 'É', 'ſ', 'k',
        ];
        let mut seed = 7u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        for _ in 0..20_000 {
            let len = next() % 20;
            let a: String = (0..len)
                .map(|_| alphabet[next() % alphabet.len()])
                .collect();
            // Its twin, each character maybe swapped for its other case or another one.
            let b: String = a
                .chars()
                .map(|c| match next() % 4 {
                    0 => c.to_ascii_uppercase(),
                    1 => c.to_ascii_lowercase(),
                    2 => alphabet[next() % alphabet.len()],
                    _ => c,
                })
                .collect();
            assert_eq!(
                eq_ignore_ascii_case(&a, &b),
                a.eq_ignore_ascii_case(&b),
                "{a:?} {b:?}"
            );
        }
        assert!(eq_ignore_ascii_case(
            "Content-Length-And-More",
            "content-length-and-more"
        ));
        assert!(!eq_ignore_ascii_case("content-lengtH@", "content-length`"));
    }

    #[test]
    fn split_ascii_cuts_as_str_split_does() {
        for s in [
            "",
            "/",
            "//",
            "a",
            "/api/v1/namespaces/é/pods/",
            "a//b/",
            "é/ſ/",
        ] {
            let ours: Vec<&str> = super::split_ascii(s, b'/').collect();
            let std: Vec<&str> = s.split('/').collect();
            assert_eq!(ours, std, "{s:?}");
        }
    }
}

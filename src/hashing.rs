//! The small hashes the hub spreads work by (pure, imports nothing): FNV-1a-64 for keys and
//! seeds, splitmix64's finalizer to mix them, and rendezvous hashing over them. Two users:
//! `health` (the cloud servers in `consistent-hashing` mode) and `pool::health` (a
//! follower's pool leader, keyed by its node name).

/// FNV-1a-64's offset basis: the `hash` to start [`fnv1a`] from.
pub(crate) const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a-64 of `bytes`, continuing from `hash` ([`FNV_OFFSET`] for a fresh hash).
pub(crate) fn fnv1a(hash: u64, bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(hash, |h, &b| (h ^ u64::from(b)).wrapping_mul(FNV_PRIME))
}

/// splitmix64's finalizer: spreads the bits of a seed-mixed key so that every candidate's
/// score is an independent-looking draw.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Rendezvous hashing: the score of the candidate with seed `seed` for `key`; the highest
/// score wins. So keys spread evenly, a key keeps its candidate while it is there, and a
/// candidate's loss moves only its own keys (each to its next-highest).
pub(crate) fn rendezvous(key: u64, seed: u64) -> u64 {
    splitmix64(key ^ seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_reference_hash() {
        // FNV-1a-64 test vectors.
        assert_eq!(fnv1a(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            fnv1a(fnv1a(FNV_OFFSET, b"fo"), b"o"),
            fnv1a(FNV_OFFSET, b"foo")
        );
        assert_eq!(rendezvous(1, 2), splitmix64(3));
    }
}

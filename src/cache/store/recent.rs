//! Which objects changed lately, by the index's path hash: a whole list wins over everything
//! stored before it began, and yields only to what the cloud said while it was in flight (a
//! watch event or a get stored meanwhile), so its commit must tell the two apart.
//!
//! Every change the store makes outside a replacement, and every rename or delete of a
//! journal, is numbered by the store's change counter and noted here with its object's path
//! hash. The last [`RECENT`] are kept; a change that is not one object's (a collection removed
//! whole) or one forgotten from the ring makes everything before it "unknown", and an
//! unknown change counts as a change to every object (the old, cautious comparison).

use std::collections::{HashSet, VecDeque};

/// Changes remembered: 16 bytes each (64 KiB at most). A list is staged for seconds; a node
/// stores a few watch events a second, so only a list staged during heavy churn reaches back
/// further, and is then judged as if everything had changed.
const RECENT: usize = 4096;

/// The last changes, oldest first.
#[derive(Debug, Default)]
pub(super) struct RecentChanges {
    /// (change number, path hash), numbers rising.
    ring: VecDeque<(usize, u64)>,
    /// Changes up to this number are not known object by object.
    unknown_up_to: usize,
}

/// The objects changed since a replacement began, by path hash.
#[derive(Debug)]
pub(super) enum Changed {
    /// Exactly these (often none).
    Only(HashSet<u64>),
    /// Not known: take every object as changed.
    Unknown,
}

impl Changed {
    /// Whether the object at path hash `at` may have changed.
    pub(super) fn contains(&self, at: u64) -> bool {
        match self {
            Changed::Only(set) => set.contains(&at),
            Changed::Unknown => true,
        }
    }
}

impl RecentChanges {
    /// Notes change number `seq`, of the object at path hash `at` (`None`: of more than one
    /// object). Numbers must rise.
    pub(super) fn note(&mut self, seq: usize, at: Option<u64>) {
        let Some(at) = at else {
            self.unknown_up_to = seq;
            return;
        };
        if self.ring.len() >= RECENT
            && let Some((forgotten, _)) = self.ring.pop_front()
        {
            self.unknown_up_to = self.unknown_up_to.max(forgotten);
        }
        self.ring.push_back((seq, at));
    }

    /// The objects changed after change number `since`.
    pub(super) fn since(&self, since: usize) -> Changed {
        if self.unknown_up_to > since {
            return Changed::Unknown;
        }
        let after = self.ring.iter().rev().take_while(|(seq, _)| *seq > since);
        Changed::Only(after.map(|&(_, at)| at).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_known_by_object_until_forgotten() {
        let mut recent = RecentChanges::default();
        recent.note(1, Some(10));
        recent.note(2, Some(20));
        let changed = recent.since(1);
        assert!(changed.contains(20) && !changed.contains(10));
        assert!(!recent.since(2).contains(20));
        // A collection removed whole: everything before it is unknown.
        recent.note(3, None);
        assert!(recent.since(2).contains(99));
        assert!(!recent.since(3).contains(99));
        // Past the ring's size, the oldest are forgotten, and so unknown.
        for seq in 4..4 + RECENT {
            recent.note(seq, Some(7));
        }
        assert!(!recent.since(3).contains(99));
        recent.note(4 + RECENT, Some(7));
        assert!(recent.since(3).contains(99));
        assert!(!recent.since(4).contains(99));
    }
}

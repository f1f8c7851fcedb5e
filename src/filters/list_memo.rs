//! Lists the filter stage found nothing to change in (issue 34). Two answers to one request
//! (its path and query, and the form it accepts) that carry one list `metadata.resourceVersion`
//! are one snapshot of the cloud: Kubernetes guarantees it, and the cache writer's memos
//! (`cache/writer/unchanged.rs`) rest on the same. Filters whose output is a function of the
//! object and fixed settings alone (the chain's form, [`Chain::reproducible_form`]) then
//! decide the same on both. So once a list went through its filters with every item unchanged
//! (none rewritten, dropped or unreadable), its repeat at the same resourceVersion needs no
//! scan: the filter stage reads it up to `metadata` and passes the rest as it came.
//!
//! What is remembered, in memory only and for a bounded number of requests: the request, the
//! chain's form, the list's resourceVersion and how many items it held (for the filters'
//! counters). A list some item of which a filter changed is never remembered, nor one whose
//! `metadata` came after its items.
//!
//! [`Chain::reproducible_form`]: crate::filters::Chain::reproducible_form

use std::collections::VecDeque;
use std::sync::Mutex;

/// Memos kept; past it the oldest goes (a memo is an optimisation only).
const MEMOS: usize = 64;

/// One list its filters left unchanged.
struct Memo {
    /// The request ([`Recall::scope`]).
    scope: Box<str>,
    /// What the filters' output was a function of.
    form: u64,
    list_rv: Box<str>,
    items: usize,
}

/// The memos of lists the filters left unchanged, shared by every connection.
#[derive(Default)]
pub(crate) struct ListMemos {
    memos: Mutex<VecDeque<Memo>>,
}

impl ListMemos {
    /// The items of the list answered to `scope` at `list_rv` under `form`, when its filters
    /// were found to change none of them.
    pub(crate) fn unchanged(&self, scope: &str, form: u64, list_rv: &str) -> Option<usize> {
        // A poisoned lock holds whole memos: each is pushed whole.
        let memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        memos
            .iter()
            .find(|m| m.form == form && *m.scope == *scope && *m.list_rv == *list_rv)
            .map(|m| m.items)
    }

    /// Remembers that the filters changed none of the `items` of the list answered to
    /// `scope` at `list_rv` under `form`, in place of what was remembered of that request.
    pub(crate) fn remember(&self, scope: &str, form: u64, list_rv: &str, items: usize) {
        let mut memos = self.memos.lock().unwrap_or_else(|p| p.into_inner());
        memos.retain(|m| !(m.form == form && *m.scope == *scope));
        if memos.len() == MEMOS {
            memos.pop_front();
        }
        memos.push_back(Memo {
            scope: scope.into(),
            form,
            list_rv: list_rv.into(),
            items,
        });
    }
}

/// What a list's filter stage checks against the memos, and records there.
pub(crate) struct Recall<'f> {
    /// The memos.
    pub memos: &'f ListMemos,
    /// The request: its `Accept` and its path and query, as the cloud got them.
    pub scope: String,
    /// The chain's form ([`Chain::reproducible_form`](crate::filters::Chain::reproducible_form)).
    pub form: u64,
}

impl<'f> Recall<'f> {
    /// The recall of a request for `path_and_query` accepting `accept`.
    pub(crate) fn new(memos: &'f ListMemos, accept: &str, path_and_query: &str, form: u64) -> Self {
        Recall {
            memos,
            scope: format!("{accept}\n{path_and_query}"),
            form,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memo_holds_for_its_request_form_and_resource_version_only() {
        let memos = ListMemos::default();
        memos.remember("a", 1, "7", 3);
        assert_eq!(memos.unchanged("a", 1, "7"), Some(3));
        assert_eq!(memos.unchanged("a", 1, "8"), None);
        assert_eq!(memos.unchanged("a", 3, "7"), None);
        assert_eq!(memos.unchanged("b", 1, "7"), None);
        // A newer list of the request takes its place.
        memos.remember("a", 1, "8", 4);
        assert_eq!(memos.unchanged("a", 1, "7"), None);
        assert_eq!(memos.unchanged("a", 1, "8"), Some(4));
    }

    #[test]
    fn memos_are_bounded_oldest_first() {
        let memos = ListMemos::default();
        for i in 0..=MEMOS {
            memos.remember(&i.to_string(), 1, "7", i);
        }
        assert_eq!(memos.unchanged("0", 1, "7"), None);
        assert_eq!(memos.unchanged("1", 1, "7"), Some(1));
        assert_eq!(memos.unchanged(&MEMOS.to_string(), 1, "7"), Some(MEMOS));
    }
}

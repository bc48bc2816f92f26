//! Supersession and cancellation of completion requests.
//!
//! At most one completion per document is live: a newer request for the same document, or an
//! edit of it, cancels the older one. A request whose handler future is dropped (tower-lsp drops
//! it on `$/cancelRequest`) cancels itself. Generation polls [`CancelFlag::is_cancelled`] once
//! per decode step, so it stops within one step either way.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tower_lsp_server::lsp_types::Uri;

/// Why a request stopped early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The client cancelled it, or stopped waiting for it.
    ByClient,
    /// A newer completion request for the same document arrived.
    ByNewerRequest,
    /// The document changed or closed.
    ByEdit,
}

const LIVE: u8 = 0;

impl Cancelled {
    fn code(self) -> u8 {
        match self {
            Cancelled::ByClient => 1,
            Cancelled::ByNewerRequest => 2,
            Cancelled::ByEdit => 3,
        }
    }

    fn from_code(code: u8) -> Option<Cancelled> {
        match code {
            1 => Some(Cancelled::ByClient),
            2 => Some(Cancelled::ByNewerRequest),
            3 => Some(Cancelled::ByEdit),
            _ => None,
        }
    }
}

/// A cancellation flag shared by a request and the generation it runs. The first reason set wins.
#[derive(Debug, Clone, Default)]
pub struct CancelFlag(Arc<AtomicU8>);

impl CancelFlag {
    pub fn cancel(&self, reason: Cancelled) {
        let _ = self.0.compare_exchange(LIVE, reason.code(), Ordering::AcqRel, Ordering::Acquire);
    }

    pub fn reason(&self) -> Option<Cancelled> {
        Cancelled::from_code(self.0.load(Ordering::Acquire))
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire) != LIVE
    }
}

/// The live completion request of each document.
#[derive(Debug, Default)]
pub struct InFlight {
    live: Mutex<HashMap<Uri, (u64, CancelFlag)>>,
    next_id: AtomicU64,
}

impl InFlight {
    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<Uri, (u64, CancelFlag)>> {
        self.live.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a new request for `uri`, superseding the previous one.
    pub fn begin(self: &Arc<Self>, uri: &Uri) -> Ticket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let flag = CancelFlag::default();
        if let Some((_, older)) = self.live().insert(uri.clone(), (id, flag.clone())) {
            older.cancel(Cancelled::ByNewerRequest);
        }
        Ticket { registry: Arc::clone(self), uri: uri.clone(), id, flag }
    }

    /// Cancels the live request of `uri`, if any (the document changed or closed).
    pub fn supersede(&self, uri: &Uri) {
        if let Some((_, flag)) = self.live().remove(uri) {
            flag.cancel(Cancelled::ByEdit);
        }
    }

    /// Number of live requests.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live().len()
    }
}

/// A registered request. Dropping it cancels its generation (if still running) and unregisters it.
#[derive(Debug)]
pub struct Ticket {
    registry: Arc<InFlight>,
    uri: Uri,
    id: u64,
    flag: CancelFlag,
}

impl Ticket {
    pub fn flag(&self) -> &CancelFlag {
        &self.flag
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.flag.cancel(Cancelled::ByClient);
        let mut live = self.registry.live();
        if live.get(&self.uri).is_some_and(|(id, _)| *id == self.id) {
            live.remove(&self.uri);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(name: &str) -> Uri {
        format!("file:///w/{name}").parse().unwrap()
    }

    #[test]
    fn a_newer_request_supersedes_only_its_own_document() {
        let registry = Arc::new(InFlight::default());
        let first = registry.begin(&uri("a.py"));
        let other = registry.begin(&uri("b.py"));
        let second = registry.begin(&uri("a.py"));
        assert_eq!(first.flag().reason(), Some(Cancelled::ByNewerRequest));
        assert!(!other.flag().is_cancelled());
        assert!(!second.flag().is_cancelled());
        // The superseded ticket's drop must not unregister the newer one.
        drop(first);
        assert_eq!(registry.len(), 2);
        registry.supersede(&uri("a.py"));
        assert_eq!(second.flag().reason(), Some(Cancelled::ByEdit));
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn dropping_a_ticket_cancels_its_generation() {
        let registry = Arc::new(InFlight::default());
        let ticket = registry.begin(&uri("a.py"));
        let flag = ticket.flag().clone();
        drop(ticket);
        assert_eq!(flag.reason(), Some(Cancelled::ByClient));
        assert_eq!(registry.len(), 0);
    }
}

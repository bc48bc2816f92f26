//! Supersession and cancellation of completion requests.
//!
//! At most one completion per document is live: a newer request for the same document
//! ([`Cancelled::Superseded`]), or an edit of it ([`Cancelled::InputChanged`]), cancels the
//! older one. A request whose handler future is dropped (tower-lsp drops it on
//! `$/cancelRequest`) cancels itself ([`Cancelled::Abandoned`]). A cancelled request is
//! answered at once; whether its generation runs on is the engine's choice (it does while the
//! person types what it predicts, see `engine::ModelEngine`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use copilotd_draft::cancel::{CancelToken, Cancelled};
use tower_lsp_server::lsp_types::Uri;

use crate::sync::lock;

/// The live completion request of each document.
#[derive(Debug, Default)]
pub struct InFlight {
    live: Mutex<HashMap<Uri, (u64, CancelToken)>>,
    next_id: AtomicU64,
}

impl InFlight {
    /// Registers a new request for `uri`, superseding the previous one.
    pub fn begin(self: &Arc<Self>, uri: &Uri) -> Ticket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let token = CancelToken::new();
        if let Some((_, older)) = lock(&self.live).insert(uri.clone(), (id, token.clone())) {
            older.cancel(Cancelled::Superseded);
        }
        Ticket { registry: Arc::clone(self), uri: uri.clone(), id, token }
    }

    /// Cancels the live request of `uri`, if any (the document changed or closed).
    pub fn supersede(&self, uri: &Uri) {
        if let Some((_, token)) = lock(&self.live).remove(uri) {
            token.cancel(Cancelled::InputChanged);
        }
    }

    /// Number of live requests.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.live).len()
    }
}

/// A registered request. Dropping it cancels its generation (if still running) and unregisters it.
#[derive(Debug)]
pub struct Ticket {
    registry: Arc<InFlight>,
    uri: Uri,
    id: u64,
    token: CancelToken,
}

impl Ticket {
    pub fn token(&self) -> &CancelToken {
        &self.token
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.token.cancel(Cancelled::Abandoned);
        let mut live = lock(&self.registry.live);
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
        assert_eq!(first.token().reason(), Some(Cancelled::Superseded));
        assert!(!other.token().is_cancelled());
        assert!(!second.token().is_cancelled());
        // The superseded ticket's drop must not unregister the newer one.
        drop(first);
        assert_eq!(registry.len(), 2);
        registry.supersede(&uri("a.py"));
        assert_eq!(second.token().reason(), Some(Cancelled::InputChanged));
        assert_eq!(registry.len(), 1);
    }

    #[test]
    fn dropping_a_ticket_cancels_its_generation() {
        let registry = Arc::new(InFlight::default());
        let ticket = registry.begin(&uri("a.py"));
        let token = ticket.token().clone();
        drop(ticket);
        assert_eq!(token.reason(), Some(Cancelled::Abandoned));
        assert_eq!(registry.len(), 0);
    }
}

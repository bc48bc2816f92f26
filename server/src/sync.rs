//! Locks that survive a panic elsewhere.
//!
//! A handler that panics while holding a lock poisons it; the daemon catches such panics and
//! goes on, and its locked state is replaced whole (never left half-updated), so a poisoned
//! lock is used as if it were not.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_still_usable() {
        let mutex = Mutex::new(1);
        let rwlock = RwLock::new(1);
        let _ = std::panic::catch_unwind(|| {
            let _m = mutex.lock().unwrap();
            let _w = rwlock.write().unwrap();
            panic!("poison both");
        });
        assert!(mutex.is_poisoned() && rwlock.is_poisoned());
        *lock(&mutex) += 1;
        *write(&rwlock) += 1;
        assert_eq!((*lock(&mutex), *read(&rwlock)), (2, 2));
    }
}

//! Running the strategies on your own storage: implement `Store` (get, set
//! with a TTL, delete) and wrap it in a `StoreBackend`.
//!
//! `cargo run -p tollgate --example custom_store`
//!
//! The adapter serialises decisions on the same key within this process.
//! Atomicity across processes is up to the store: a plain key-value store
//! shared by several processes can race between get and set.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tollgate::backend::store::{Store, StoreBackend};
use tollgate::backend::BackendError;
use tollgate::{Limiter, Strategy};

/// Values with their expiry deadlines, ordered by key.
type Entries = BTreeMap<Vec<u8>, (Vec<u8>, Instant)>;

/// A toy store: an ordered map with expiry deadlines.
#[derive(Default)]
struct OrderedStore {
    entries: Mutex<Entries>,
}

impl Store for OrderedStore {
    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, BackendError> {
        let entries = self.entries.lock().expect("store lock");
        Ok(entries
            .get(key)
            .filter(|(_, deadline)| *deadline > Instant::now())
            .map(|(value, _)| value.clone()))
    }

    async fn set(&self, key: &[u8], value: Vec<u8>, ttl: Duration) -> Result<(), BackendError> {
        let mut entries = self.entries.lock().expect("store lock");
        entries.insert(key.to_vec(), (value, Instant::now() + ttl));
        Ok(())
    }

    async fn delete(&self, key: &[u8]) -> Result<(), BackendError> {
        self.entries.lock().expect("store lock").remove(key);
        Ok(())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), tollgate::Error> {
    // The limiter's backend and this function share the store (a `Store`
    // behind an `Arc` is one), so the entries can be listed below.
    let store = Arc::new(OrderedStore::default());
    let limiter = Limiter::builder()
        .strategy(Strategy::TokenBucket)
        .limit(3)
        .window(Duration::from_secs(60))
        .key_prefix("myapp")
        .resource("api")
        .backend(StoreBackend::new(Arc::clone(&store)))
        .build()?;

    for i in 1..=4 {
        let d = limiter.allow("user-42").await?;
        println!(
            "request {i}: allowed={} remaining={} retry_after={:?}",
            d.allowed, d.remaining, d.retry_after
        );
    }
    for key in store.entries.lock().expect("store lock").keys() {
        println!("stored under {:?}", String::from_utf8_lossy(key));
    }
    Ok(())
}

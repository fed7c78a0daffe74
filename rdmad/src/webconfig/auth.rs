//! `basic_auth_users`: bcrypt hashes checked at startup, and the cache of accepted passwords
//! (see the module doc of `webconfig`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use axum::http::{header, HeaderMap};
use base64::Engine as _;

/// `basic_auth_users`: users and their bcrypt hashes, and the cache of accepted passwords.
pub struct BasicAuth {
    users: HashMap<String, String>,
    /// Checked for unknown users, so that they take as long as known ones.
    dummy_hash: String,
    /// Keys the cache's HMACs; drawn at startup, never leaves the process.
    key: ring::hmac::Key,
    /// Per user, the HMAC of `user \0 password` of the last accepted password.
    accepted: Mutex<HashMap<String, ring::hmac::Tag>>,
    /// One bcrypt check at a time.
    bcrypt_slot: tokio::sync::Semaphore,
    /// bcrypt checks run so far (tests: the cache works).
    bcrypt_runs: std::sync::atomic::AtomicU64,
}

impl BasicAuth {
    /// Check every hash; errors name the user, never the hash.
    pub fn new(users: BTreeMap<String, String>) -> Result<BasicAuth> {
        let mut max_cost = 4;
        for (user, hash) in &users {
            if user.contains(':') {
                bail!("{user}: a user name cannot contain ':' (HTTP basic auth separates user and password with it)");
            }
            let cost = check_hash(hash).map_err(|e| anyhow!("{user}: not a bcrypt hash: {e}"))?;
            max_cost = max_cost.max(cost);
        }
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow!("no randomness from the OS"))?;
        let mut secret = [0u8; 16];
        ring::rand::SecureRandom::fill(&rng, &mut secret)
            .map_err(|_| anyhow!("no randomness from the OS"))?;
        let dummy_hash = bcrypt::hash(secret, max_cost).context("making the dummy hash")?;
        Ok(BasicAuth {
            users: users.into_iter().collect(),
            dummy_hash,
            key,
            accepted: Mutex::new(HashMap::new()),
            bcrypt_slot: tokio::sync::Semaphore::new(1),
            bcrypt_runs: Default::default(),
        })
    }

    /// How many users are configured.
    pub fn users(&self) -> usize {
        self.users.len()
    }

    /// How many bcrypt checks ran.
    pub fn bcrypt_runs(&self) -> u64 {
        self.bcrypt_runs.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the request's `Authorization` header holds a valid user and password.
    pub async fn allows(self: &Arc<Self>, headers: &HeaderMap) -> bool {
        let Some((user, password)) = credentials(headers) else {
            return false;
        };
        let message = [user.as_bytes(), b"\0", password.as_bytes()].concat();
        if self.cached(&user, &message) {
            return true;
        }
        // One bcrypt at a time; the semaphore is never closed.
        let Ok(_slot) = self.bcrypt_slot.acquire().await else {
            return false;
        };
        // A concurrent request with the same credentials may have filled the cache meanwhile.
        if self.cached(&user, &message) {
            return true;
        }
        let auth = Arc::clone(self);
        let check_user = user.clone();
        let verified = tokio::task::spawn_blocking(move || {
            auth.bcrypt_runs
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            match auth.users.get(&check_user) {
                Some(hash) => bcrypt::verify(&password, hash).unwrap_or(false),
                None => {
                    let _ = bcrypt::verify(&password, &auth.dummy_hash);
                    false
                }
            }
        })
        .await
        .unwrap_or(false);
        if verified {
            let tag = ring::hmac::sign(&self.key, &message);
            self.accepted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(user, tag);
        }
        verified
    }

    /// Whether `user`'s last accepted password is the one in `message` (constant time).
    fn cached(&self, user: &str, message: &[u8]) -> bool {
        let accepted = self.accepted.lock().unwrap_or_else(|e| e.into_inner());
        match accepted.get(user) {
            Some(tag) => ring::hmac::verify(&self.key, message, tag.as_ref()).is_ok(),
            None => false,
        }
    }
}

/// The cost of a bcrypt hash, or why it is not one.
fn check_hash(hash: &str) -> Result<u32, String> {
    let parts: bcrypt::HashParts = hash
        .parse()
        .map_err(|e: bcrypt::BcryptError| e.to_string())?;
    let cost = parts.get_cost();
    if !(4..=31).contains(&cost) {
        return Err(format!("cost {cost} is outside 4..=31"));
    }
    let body = hash.rsplit('$').next().unwrap_or_default();
    if !body
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/')
    {
        return Err("salt and hash must be bcrypt base64 (./A-Za-z0-9)".into());
    }
    Ok(cost)
}

/// The user and password of an `Authorization: Basic` header.
fn credentials(headers: &HeaderMap) -> Option<(String, String)> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, encoded) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn basic(user: &str, password: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Basic {encoded}")).unwrap(),
        );
        headers
    }

    #[tokio::test]
    async fn basic_auth_checks_and_caches_successes_only() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let auth =
            Arc::new(BasicAuth::new(BTreeMap::from([("prometheus".to_string(), hash)])).unwrap());
        assert!(!auth.allows(&HeaderMap::new()).await, "no header");
        assert_eq!(auth.bcrypt_runs(), 0, "no header, no bcrypt");
        let mut bearer = HeaderMap::new();
        bearer.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer x"));
        assert!(!auth.allows(&bearer).await, "another scheme");

        assert!(auth.allows(&basic("prometheus", "s3cret")).await);
        assert_eq!(auth.bcrypt_runs(), 1);
        for _ in 0..5 {
            assert!(auth.allows(&basic("prometheus", "s3cret")).await);
        }
        assert_eq!(auth.bcrypt_runs(), 1, "later checks hit the cache");

        assert!(!auth.allows(&basic("prometheus", "wrong")).await);
        assert!(!auth.allows(&basic("prometheus", "wrong")).await);
        assert_eq!(auth.bcrypt_runs(), 3, "failures are not cached");
        assert!(
            !auth.allows(&basic("mallory", "s3cret")).await,
            "unknown user"
        );
        assert_eq!(auth.bcrypt_runs(), 4, "an unknown user costs a bcrypt too");
        assert!(
            !auth.allows(&basic("prometheus", "s3cret\0")).await,
            "a cached password only matches exactly"
        );
        assert!(auth.allows(&basic("prometheus", "s3cret")).await);
        assert_eq!(auth.bcrypt_runs(), 5);
    }

    #[tokio::test]
    async fn concurrent_scrapes_share_one_bcrypt() {
        let hash = bcrypt::hash("pw", 4).unwrap();
        let auth = Arc::new(BasicAuth::new(BTreeMap::from([("u".to_string(), hash)])).unwrap());
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let auth = Arc::clone(&auth);
                tokio::spawn(async move { auth.allows(&basic("u", "pw")).await })
            })
            .collect();
        for task in tasks {
            assert!(task.await.unwrap());
        }
        assert_eq!(auth.bcrypt_runs(), 1, "the others waited and hit the cache");
    }
}

//! The console's logins under `--auth` (issue 35): a user name and password checked against the
//! server's SCRAM credentials (`Security::check_password`), then a random session token in an
//! `HttpOnly`, `SameSite=Strict` cookie, so the page's requests carry it and nothing else on the
//! page can read it. Sessions live in memory, [`CONSOLE_SESSION_TTL`] each, at most
//! [`MAX_CONSOLE_SESSIONS`] at once (past it a login is refused until one expires); a restart
//! logs everyone out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::RngCore;

/// How long a console login lasts.
pub const CONSOLE_SESSION_TTL: Duration = Duration::from_secs(60 * 60);
/// Most console sessions at once.
pub const MAX_CONSOLE_SESSIONS: usize = 1_024;
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "fencelog_session";

/// The live console sessions: token → (user, expiry).
#[derive(Debug, Default)]
pub struct Sessions {
    live: Mutex<HashMap<String, (Arc<str>, Instant)>>,
}

impl Sessions {
    /// A new session of `user`: its token, or `None` while [`MAX_CONSOLE_SESSIONS`] are live.
    pub fn open(&self, user: &str) -> Option<String> {
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, (_, expires)| *expires > now);
        if live.len() >= MAX_CONSOLE_SESSIONS {
            return None;
        }
        let mut bytes = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut bytes);
        let token: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
        live.insert(token.clone(), (Arc::from(user), now + CONSOLE_SESSION_TTL));
        Some(token)
    }

    /// The user of the session a `Cookie` header names, if it is live.
    pub fn user(&self, cookie_header: Option<&str>) -> Option<Arc<str>> {
        let token = cookie_header?.split(';').find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == SESSION_COOKIE).then_some(value)
        })?;
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.get(token)
            .filter(|(_, expires)| *expires > Instant::now())
            .map(|(user, _)| Arc::clone(user))
    }

    /// Ends the session a `Cookie` header names.
    pub fn close(&self, cookie_header: Option<&str>) {
        let Some(token) = cookie_header.and_then(|header| {
            header.split(';').find_map(|pair| {
                let (name, value) = pair.trim().split_once('=')?;
                (name == SESSION_COOKIE).then(|| value.to_string())
            })
        }) else {
            return;
        };
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&token);
    }
}

/// The `user` and `password` fields of a login form (`application/x-www-form-urlencoded`).
pub fn login_form(body: &[u8]) -> Option<(String, String)> {
    let mut user = None;
    let mut password = None;
    for (name, value) in form_urlencoded::parse(body) {
        match name.as_ref() {
            "user" => user = Some(value.into_owned()),
            "password" => password = Some(value.into_owned()),
            _ => {}
        }
    }
    Some((user?, password?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_by_its_cookie_and_ends_on_logout() {
        let sessions = Sessions::default();
        let token = sessions.open("alice").unwrap();
        let cookie = format!("other=1; {SESSION_COOKIE}={token}");
        assert_eq!(sessions.user(Some(&cookie)).as_deref(), Some("alice"));
        assert!(sessions.user(Some("fencelog_session=forged")).is_none());
        assert!(sessions.user(None).is_none());
        sessions.close(Some(&cookie));
        assert!(sessions.user(Some(&cookie)).is_none());
        assert_eq!(
            login_form(b"user=al%20ice&password=p%26w"),
            Some(("al ice".to_string(), "p&w".to_string()))
        );
        assert_eq!(login_form(b"user=x"), None);
    }
}

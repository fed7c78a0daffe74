//! The middleware of a web configuration: basic auth on every request, extra headers on
//! every response.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;

use super::{BasicAuth, WebConfig};

/// What the middleware needs.
#[derive(Clone)]
struct Guard {
    auth: Option<Arc<BasicAuth>>,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
}

impl WebConfig {
    /// `router` behind basic auth and with the extra headers (unchanged when neither is set).
    pub fn apply(&self, router: Router) -> Router {
        if self.auth.is_none() && self.headers.is_empty() {
            return router;
        }
        let guard = Guard {
            auth: self.auth.clone(),
            headers: Arc::new(self.headers.clone()),
        };
        router.layer(axum::middleware::from_fn_with_state(guard, guard_request))
    }
}

async fn guard_request(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let allowed = match &guard.auth {
        Some(auth) => auth.allows(request.headers()).await,
        None => true,
    };
    let mut response = if allowed {
        next.run(request).await
    } else {
        tracing::debug!(path = %request.uri().path(), "basic auth: request refused");
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Basic realm=\"rdmad\"")],
            "Unauthorized\n",
        )
            .into_response()
    };
    for (name, value) in guard.headers.iter() {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

//! The API's extractors: path, query and body with their rejections as JSON errors like
//! every other answer of the service.

use axum::extract::{FromRequest, FromRequestParts};
use axum::http::request::Parts;

use crate::ServiceError;

/// Largest request body: a job of many thousand files.
pub const MAX_BODY: usize = 32 << 20;

/// A path's parameters; a bad one is a JSON 400 like every other error.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ServiceError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(t)| Path(t))
            .map_err(|e| ServiceError::BadRequest(e.body_text()))
    }
}

/// A query string; a bad one is a JSON 400.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ServiceError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(t)| Query(t))
            .map_err(|e| ServiceError::BadRequest(e.body_text()))
    }
}

/// A request body within [`MAX_BODY`]; a bigger one is a JSON 413. Up to [`DRAIN`] bytes
/// past the limit are read and dropped first, so that the client, still sending, gets the
/// answer instead of a reset connection.
pub struct Body(pub axum::body::Bytes);

/// A JSON request body: [`Body`] sent as `application/json`, anything else a JSON 415. A
/// browser's form may post `text/plain` to another site with the user's client certificate,
/// but it cannot send `application/json` there without the site's consent (CORS), so a JSON
/// endpoint that takes only JSON cannot be posted to from another site's page.
pub struct JsonBody(pub axum::body::Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ServiceError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        if !declared.as_deref().is_some_and(is_json) {
            return Err(ServiceError::UnsupportedMediaType(format!(
                "the body must be sent as Content-Type: application/json, not {}",
                declared.as_deref().unwrap_or("without one")
            )));
        }
        Body::from_request(req, state)
            .await
            .map(|Body(b)| JsonBody(b))
    }
}

/// Whether a `Content-Type` is `application/json`, parameters (`; charset=utf-8`) aside.
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// How much of an oversized body is read before the 413 (more is cut off).
const DRAIN: usize = 64 << 20;

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = ServiceError;

    async fn from_request(req: axum::extract::Request, _: &S) -> Result<Self, Self::Rejection> {
        use futures_util::StreamExt;
        let mut stream = req.into_body().into_data_stream();
        let mut buf = Vec::new();
        let mut seen = 0usize;
        while let Some(chunk) = stream.next().await {
            let chunk =
                chunk.map_err(|e| ServiceError::BadRequest(format!("reading the body: {e}")))?;
            seen += chunk.len();
            if seen <= MAX_BODY {
                buf.extend_from_slice(&chunk);
            } else if seen > MAX_BODY + DRAIN {
                break;
            }
        }
        if seen > MAX_BODY {
            return Err(ServiceError::TooLarge(format!(
                "the body is larger than {} MiB",
                MAX_BODY >> 20
            )));
        }
        Ok(Body(buf.into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_application_json_is_json() {
        for yes in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
        ] {
            assert!(is_json(yes), "{yes}");
        }
        for no in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "text/plain; application/json",
            "",
        ] {
            assert!(!is_json(no), "{no}");
        }
    }
}

//! What every request passes before a handler sees it: basic auth (when
//! configured), the `Host` of a loopback listener (against DNS rebinding),
//! for any other method than POST the cross-site load check (another site's
//! page may not make the dashboard run its queries by embedding its
//! addresses: [`cross_site_load_refusal`]), and for a POST the cross-site
//! checks (`Sec-Fetch-Site`, `Origin`) and the form token; and the headers
//! every response carries (a Content Security Policy that allows no script
//! at all, no framing, no sniffing).
//!
//! The form token is one random value per process ([`new_token`]), put in
//! every POST form as the hidden field `csrf`: another site can neither read
//! it (the same-origin policy) nor guess it. A restart changes it, so a form
//! loaded before a restart is refused (load the page again).

use std::sync::Arc;

use axum::body::{to_bytes, Body};
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use subtle::ConstantTimeEq;

use crate::cli::Credentials;
use crate::error::AppError;
use crate::routes::App;

/// The name of the form field that carries the token.
pub const TOKEN_FIELD: &str = "csrf";

/// The largest POST body read (the forms send a few short fields).
pub const MAX_FORM_BYTES: usize = 16 * 1024;

/// A new random form token (32 bytes from the operating system, base64url).
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for the form token: {e}"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

/// Constant-time equality of two byte strings (their lengths may differ).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// The `user:password` bytes a request's `Authorization: Basic ...` must decode to.
pub fn expected_basic(credentials: &Credentials) -> Vec<u8> {
    format!("{}:{}", credentials.user, credentials.password).into_bytes()
}

/// Whether `headers` carry basic-auth credentials decoding to `expected`.
pub fn basic_auth_ok(headers: &HeaderMap, expected: &[u8]) -> bool {
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, encoded)) = value.trim().split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return false;
    }
    match STANDARD.decode(encoded.trim()) {
        Ok(decoded) => same(&decoded, expected),
        Err(_) => false,
    }
}

/// Whether the host part of a `Host` header names the loopback interface
/// (`localhost`, `127.x.y.z`, `[::1]`), with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((inside, port)) if port.is_empty() || port.starts_with(':') => inside,
            _ => return false,
        }
    } else {
        host.rsplit_once(':').map_or(host, |(name, _)| name)
    };
    if name.eq_ignore_ascii_case("localhost") {
        return true;
    }
    name.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Why a POST is refused before its form is read, if it is: a
/// `Sec-Fetch-Site: cross-site`, or an `Origin` that is not
/// `http://HOST` (or `https://HOST`, behind a TLS proxy) of the request's own `Host`.
pub fn cross_site_refusal(headers: &HeaderMap) -> Option<String> {
    let text = |name| {
        headers
            .get(name)
            .map(|v: &HeaderValue| v.to_str().unwrap_or("\u{fffd}"))
    };
    if text("sec-fetch-site").is_some_and(|s| s.eq_ignore_ascii_case("cross-site")) {
        return Some(
            "the browser says this request comes from another site (Sec-Fetch-Site: cross-site)"
                .into(),
        );
    }
    if let Some(origin) = text(header::ORIGIN.as_str()) {
        let Some(host) = text(header::HOST.as_str()) else {
            return Some("the request has an Origin but no Host".into());
        };
        let own_http = format!("http://{host}");
        let own_https = format!("https://{host}");
        if !(origin.eq_ignore_ascii_case(&own_http) || origin.eq_ignore_ascii_case(&own_https)) {
            return Some(format!(
                "the request comes from another origin ({origin}), not this dashboard's ({own_http})"
            ));
        }
    }
    None
}

/// Why a request other than a POST is refused before any query runs, if it
/// is: the browser says it comes from another site (`Sec-Fetch-Site:
/// cross-site`) and it is not a top-level navigation (`Sec-Fetch-Mode:
/// navigate` with `Sec-Fetch-Dest` `document` or absent). Another site's
/// page could otherwise make every visitor's browser load the dashboard's
/// pages as images, scripts, styles, frames or fetches (each a scan of the
/// items for the queues page and `/metrics`); a person following a link to
/// the dashboard from elsewhere is still let in. Same-origin, same-site and
/// `none` (an address typed or bookmarked) pass, and so does a request
/// without the header (a client that is not a browser, such as Prometheus).
pub fn cross_site_load_refusal(headers: &HeaderMap) -> Option<String> {
    let text = |name: &str| {
        headers
            .get(name)
            .map(|v: &HeaderValue| v.to_str().unwrap_or("\u{fffd}"))
    };
    if !text("sec-fetch-site").is_some_and(|s| s.eq_ignore_ascii_case("cross-site")) {
        return None;
    }
    let mode = text("sec-fetch-mode").unwrap_or("(none)");
    let dest = text("sec-fetch-dest");
    let top_level = mode.eq_ignore_ascii_case("navigate")
        && dest.is_none_or(|d| d.eq_ignore_ascii_case("document"));
    if top_level {
        return None;
    }
    Some(format!(
        "another site's page asked the browser to load this address (Sec-Fetch-Site: cross-site, \
         Sec-Fetch-Mode: {mode}, Sec-Fetch-Dest: {}), and this dashboard answers other sites only \
         when a person follows a link to it. Open the dashboard's address directly",
        dest.unwrap_or("(none)")
    ))
}

/// The value of field `name` in a urlencoded form body, if present.
pub fn form_field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The middleware in front of every route; see the module's documentation.
pub async fn guard(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let mut response = match check(&app, request).await {
        Ok(request) => next.run(request).await,
        Err(err) => err.into_response(),
    };
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

async fn check(app: &App, request: Request) -> Result<Request, AppError> {
    if let Some(expected) = &app.basic_auth {
        if !basic_auth_ok(request.headers(), expected) {
            return Err(AppError::Unauthorized);
        }
    }
    if app.loopback_only {
        if let Some(host) = request.headers().get(header::HOST) {
            let host = host.to_str().unwrap_or("");
            if !is_loopback_host(host) {
                return Err(AppError::Status {
                    status: StatusCode::MISDIRECTED_REQUEST,
                    title: "Wrong host",
                    message: format!(
                        "this dashboard listens on loopback only and answers requests for \
                         localhost, 127.0.0.1 or [::1], not {host:?}"
                    ),
                });
            }
        }
    }
    if request.method() != Method::POST {
        if let Some(why) = cross_site_load_refusal(request.headers()) {
            return Err(AppError::forbidden(format!("Refused: {why}.")));
        }
        return Ok(request);
    }
    if let Some(why) = cross_site_refusal(request.headers()) {
        return Err(AppError::forbidden(format!("Refused: {why}.")));
    }
    let (parts, body) = request.into_parts();
    let bytes = to_bytes(body, MAX_FORM_BYTES)
        .await
        .map_err(|_| AppError::Status {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            title: "Form too large",
            message: format!("a form of this dashboard is at most {MAX_FORM_BYTES} bytes"),
        })?;
    let token_ok = form_field(&bytes, TOKEN_FIELD)
        .is_some_and(|token| same(token.as_bytes(), app.csrf_token.as_bytes()));
    if !token_ok {
        return Err(AppError::forbidden(
            "Refused: the form's token is missing or not this dashboard's (a form from another \
             site, or from before the dashboard restarted). Load the page again and resubmit.",
        ));
    }
    Ok(Request::from_parts(parts, Body::from(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn tokens_are_random_and_long() {
        let (a, b) = (new_token().unwrap(), new_token().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), 43);
    }

    #[test]
    fn basic_auth() {
        let expected = b"u:p:w".to_vec();
        let ok = format!("Basic {}", STANDARD.encode("u:p:w"));
        assert!(basic_auth_ok(
            &headers(&[("authorization", &ok)]),
            &expected
        ));
        let bad = format!("Basic {}", STANDARD.encode("u:p"));
        assert!(!basic_auth_ok(
            &headers(&[("authorization", &bad)]),
            &expected
        ));
        assert!(!basic_auth_ok(
            &headers(&[("authorization", "Basic !!!")]),
            &expected
        ));
        assert!(!basic_auth_ok(
            &headers(&[("authorization", "Bearer x")]),
            &expected
        ));
        assert!(!basic_auth_ok(&headers(&[]), &expected));
    }

    #[test]
    fn loopback_hosts() {
        for host in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:1",
            "127.1.2.3",
            "[::1]:80",
            "[::1]",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:80",
            "10.0.0.1:80",
            "[::2]:80",
            "[::1]x",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn cross_site_checks() {
        let own = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
        ];
        assert_eq!(cross_site_refusal(&headers(&own)), None);
        assert_eq!(cross_site_refusal(&headers(&[("host", "h:1")])), None);
        assert!(cross_site_refusal(&headers(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example")
        ]))
        .is_some());
        assert!(cross_site_refusal(&headers(&[("host", "h"), ("origin", "null")])).is_some());
        assert!(
            cross_site_refusal(&headers(&[("host", "h"), ("sec-fetch-site", "cross-site")]))
                .is_some()
        );
        assert_eq!(
            cross_site_refusal(&headers(&[
                ("host", "h"),
                ("sec-fetch-site", "same-origin")
            ])),
            None
        );
    }

    #[test]
    fn cross_site_loads() {
        let refused = |pairs: &[(&'static str, &str)]| cross_site_load_refusal(&headers(pairs));
        // An <img>, a fetch, a frame of another site's page.
        for (mode, dest) in [
            ("no-cors", "image"),
            ("cors", "empty"),
            ("no-cors", "script"),
            ("navigate", "iframe"),
            ("navigate", "embed"),
        ] {
            let why = refused(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", mode),
                ("sec-fetch-dest", dest),
            ]);
            assert!(why.is_some_and(|w| w.contains(mode)), "{mode} {dest}");
        }
        assert!(refused(&[("sec-fetch-site", "cross-site")]).is_some());
        // A person following a link from elsewhere.
        assert_eq!(
            refused(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "navigate"),
                ("sec-fetch-dest", "document"),
            ]),
            None
        );
        assert_eq!(
            refused(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", "navigate")
            ]),
            None
        );
        for site in ["same-origin", "same-site", "none"] {
            assert_eq!(
                refused(&[
                    ("sec-fetch-site", site),
                    ("sec-fetch-mode", "no-cors"),
                    ("sec-fetch-dest", "image"),
                ]),
                None,
                "{site}"
            );
        }
        assert_eq!(refused(&[]), None);
    }

    #[test]
    fn form_fields() {
        assert_eq!(
            form_field(b"a=1&csrf=x%2By&b", "csrf").as_deref(),
            Some("x+y")
        );
        assert_eq!(form_field(b"a=1", "csrf"), None);
    }
}

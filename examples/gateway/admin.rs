//! The admin endpoint (`[admin]`): inspect, reset, block, unblock,
//! penalize and reward a rule's key, and list a rule's blocked keys, as
//! JSON over HTTP on an address of its own. Keys are named by what an
//! operator knows (`{"ip": "203.0.113.7"}`, `{"header": {"x-api-key":
//! "..."}}`) and derived with the rule's own extractor
//! (`ThrottleLayer::key_for`), so they are the keys the rule's requests get.
//!
//! Every request must carry `Authorization: Bearer <token>` (compared in
//! constant time over BLAKE3 digests): without it the answer is 401,
//! whatever the path or method. Bodies are capped at [`MAX_BODY`]; bad
//! input is a 4xx naming the field, never a 5xx. Each change is logged at
//! info with the peer, the operation, the rule and the key's label, in
//! which secrets are redacted ([`redact`]).
//!
//! The listener holds few connections ([`connections`]), not the public
//! listener's `[server]` limits: an operator's tools need a handful, and
//! what a slow or idle client holds is bounded by what the listener may
//! hold at once.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Map, Value, json};
use subtle::ConstantTimeEq;
use throttle_fleet_axum::core::limits::MAX_BLOCK;
use throttle_fleet_axum::core::operate::BlockCause;
use throttle_fleet_axum::core::{Key, operate::OpError, operate::Reach, rule_set::RuleSet};
use throttle_fleet_axum::key::KeyInputs;
use throttle_fleet_axum::serve::{Connections, ServeLimits};
use throttle_fleet_axum::{ClientIp, ThrottleLayer};
use throttle_fleet_config::AdminToken;

/// The largest request body read, in bytes; a larger one is answered 413
/// unread.
pub(crate) const MAX_BODY: usize = 16 * 1024;

/// The longest string accepted in a key's inputs, in bytes.
const MAX_INPUT: usize = 8 * 1024;

/// The longest block an operator may set, in seconds: the core's bound.
const MAX_BLOCK_SECS: f64 = MAX_BLOCK.as_secs_f64();

/// The admin listener's connections: at most 64 open at once and 8 per
/// client address (each IPv6 `/64`; no proxy exempt), a request's headers
/// within 5 s, a keep-alive connection idle at most 30 s; the rest as
/// [`ServeLimits::default`].
///
/// Not the public listener's `[server]` limits (10,000 connections, 256 a
/// client by default): under those, slowloris clients held hundreds of
/// connections here, each with hyper's read buffer and its task (about
/// 25 KiB), and glibc's malloc keeps what they free for reuse rather than
/// giving it back, so the process's RSS rose with each round of them
/// (BENCHMARKS.md, "The admin listener under slowloris rounds"). These
/// caps bound what all clients together make it hold to about 1.6 MiB.
pub(crate) fn connections() -> Connections {
    let limits = ServeLimits {
        max_connections: 64,
        max_connections_per_client: 8,
        header_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        ..ServeLimits::default()
    };
    Connections::new(limits, ClientIp::default()).expect("the admin listener's limits are valid")
}

/// What every handler shares: the layer (its rules as they are now), the
/// token's digest, and the log of refused requests.
#[derive(Clone)]
struct Admin {
    layer: ThrottleLayer,
    token: [u8; 32],
    refusals: Arc<Refusals>,
}

/// Requests refused for their token, logged at most once a second (with
/// how many were not logged since): a client sending thousands of them a
/// second cannot fill the disk with the log.
#[derive(Default)]
pub(crate) struct Refusals {
    /// The second (since the Unix epoch) last logged.
    last: AtomicU64,
    /// Refusals not logged since.
    quiet: AtomicU64,
}

impl Refusals {
    /// Logs a refusal of `peer`'s request unless one was logged this
    /// second; whether it did.
    pub(crate) fn log(&self, peer: &str) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let last = self.last.load(Ordering::Relaxed);
        if now > last
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let quiet = self.quiet.swap(0, Ordering::Relaxed);
            tracing::warn!(
                target: "throttle::admin",
                %peer,
                not_logged_since = quiet,
                "admin request without a valid token refused"
            );
            true
        } else {
            self.quiet.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// The admin API over `layer`, for requests bearing `token`. Serve it with
/// the peer address as `ConnectInfo<SocketAddr>` (for the logs).
pub(crate) fn router(layer: ThrottleLayer, token: &AdminToken) -> Router {
    let admin = Admin {
        layer,
        token: *blake3::hash(token.secret().as_bytes()).as_bytes(),
        refusals: Arc::default(),
    };
    Router::new()
        .route("/admin/rules", get(rules))
        .route("/admin/rules/{rule}/blocked", get(blocked))
        .route("/admin/inspect", post(inspect))
        .route("/admin/reset", post(reset))
        .route("/admin/block", post(block))
        .route("/admin/unblock", post(unblock))
        .route("/admin/penalize", post(penalize))
        .route("/admin/reward", post(reward))
        .fallback(|| async { error(StatusCode::NOT_FOUND, "no such admin route") })
        .method_not_allowed_fallback(|| async {
            error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        })
        // After the routes and fallbacks, so it guards them all: 401 first,
        // whatever the path and method.
        .layer(middleware::from_fn_with_state(admin.clone(), authorize))
        .with_state(admin)
}

/// A JSON answer.
fn reply(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A JSON error answer.
fn error(status: StatusCode, message: impl Into<String>) -> Response {
    reply(status, &json!({ "error": message.into() }))
}

/// A request refused, with its status and why: answered as a JSON error.
struct Refused(StatusCode, String);

impl Refused {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self(status, message.into())
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        error(self.0, self.1)
    }
}

/// A JSON answer, 200.
fn ok(body: Value) -> Response {
    reply(StatusCode::OK, &body)
}

/// Lets through only requests bearing the token; checks the body's
/// declared size before anything reads it.
async fn authorize(State(admin): State<Admin>, req: Request, next: Next) -> Response {
    if !bears(&admin.token, req.headers()) {
        let _ = admin.refusals.log(&peer_of(&req));
        let mut resp = error(StatusCode::UNAUTHORIZED, "a valid bearer token is required");
        resp.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return resp;
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("bodies are at most {MAX_BODY} bytes"),
        );
    }
    next.run(req).await
}

/// Whether `headers` carry exactly one `Authorization: Bearer <token>`
/// whose token is ours: the scheme without case (RFC 9110), one space, the
/// token exactly. Compared in constant time over digests of equal length.
fn bears(token: &[u8; 32], headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let value = value.as_bytes();
    let Some((scheme, presented)) = value.split_at_checked(7) else {
        return false;
    };
    let scheme_ok = scheme.eq_ignore_ascii_case(b"bearer ");
    let digest = blake3::hash(presented);
    let token_ok: bool = digest.as_bytes().ct_eq(token).into();
    scheme_ok & token_ok
}

/// The peer address the server recorded, for the logs.
fn peer_of(req: &Request) -> String {
    req.extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "unknown".to_owned(), |c| c.0.to_string())
}

/// A request's body as a JSON object, at most [`MAX_BODY`] bytes, in
/// which no object names a field twice.
async fn body_object(body: Body) -> Result<Map<String, Value>, Refused> {
    let bytes = axum::body::to_bytes(body, MAX_BODY).await.map_err(|_| {
        Refused::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("bodies are at most {MAX_BODY} bytes"),
        )
    })?;
    match crate::json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Refused::new(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object",
        )),
        // A field named twice: JSON, but ambiguous.
        Err(e) if e.is_data() => Err(Refused::new(StatusCode::BAD_REQUEST, e.to_string())),
        Err(e) => Err(Refused::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )),
    }
}

/// One operation's request: the rule (by index, as the set is now), the
/// key, its label, and the set it indexes.
struct Target {
    rules: RuleSet,
    index: usize,
    name: String,
    key: Key,
    label: String,
}

/// Reads `{"rule": ..., "key": {...}, <extra>...}`: fields other than
/// `rule`, `key` and `extra` are refused, naming them.
fn target(admin: &Admin, body: &Map<String, Value>, extra: &[&str]) -> Result<Target, Refused> {
    let bad = |m: String| Refused::new(StatusCode::BAD_REQUEST, m);
    if let Some(unknown) = body
        .keys()
        .find(|k| !matches!(k.as_str(), "rule" | "key") && !extra.contains(&k.as_str()))
    {
        return Err(bad(format!("unknown field {:?}", clip(unknown))));
    }
    let name = match body.get("rule") {
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(bad("rule: must be a rule's name (a string)".into())),
        None => return Err(bad("rule: is missing".into())),
    };
    // One snapshot of the rules for the whole operation: a reload swaps
    // them whole.
    let rules = admin.layer.rules();
    let Some(index) = rules.index_of(&name) else {
        return Err(Refused::new(
            StatusCode::NOT_FOUND,
            format!("no rule named {:?}", clip(&name)),
        ));
    };
    let key = match body.get("key") {
        Some(Value::Object(key)) => key,
        Some(_) => {
            return Err(bad(
                "key: must be an object, e.g. {\"ip\": \"203.0.113.7\"}".into(),
            ));
        }
        None => return Err(bad("key: is missing".into())),
    };
    let (key, label) = key_of(admin, &name, key).map_err(|(status, m)| Refused::new(status, m))?;
    Ok(Target {
        rules,
        index,
        name,
        key,
        label,
    })
}

/// The key named by `fields` under rule `rule`, and its label (secrets
/// redacted): `{"raw": "..."}` as is, or inputs the rule's extractor derives
/// it from.
fn key_of(
    admin: &Admin,
    rule: &str,
    fields: &Map<String, Value>,
) -> Result<(Key, String), (StatusCode, String)> {
    let bad = |m: String| (StatusCode::BAD_REQUEST, m);
    let text = |field: &str, v: &Value| -> Result<String, (StatusCode, String)> {
        match v {
            Value::String(s) if s.is_empty() => Err(bad(format!("key.{field}: is empty"))),
            Value::String(s) if s.len() > MAX_INPUT => Err(bad(format!(
                "key.{field}: is longer than {MAX_INPUT} bytes"
            ))),
            Value::String(s) => Ok(s.clone()),
            _ => Err(bad(format!("key.{field}: must be a string"))),
        }
    };
    if fields.is_empty() {
        return Err(bad(
            "key: names no input (ip, header, claim, route, user_agent, tls_fingerprint or raw)"
                .into(),
        ));
    }
    if let Some(raw) = fields.get("raw") {
        if fields.len() > 1 {
            return Err(bad(
                "key.raw: goes alone (a key as its rule stores it)".into()
            ));
        }
        let raw = text("raw", raw)?;
        return Ok((Key::new(&raw), format!("raw={}", redact(&raw))));
    }
    let mut inputs = KeyInputs::new();
    let mut label = Vec::new();
    for (field, value) in fields {
        match field.as_str() {
            "ip" => {
                let ip: IpAddr = text("ip", value)?
                    .parse()
                    .map_err(|_| bad("key.ip: is not an IP address".into()))?;
                label.push(format!("ip={ip}"));
                inputs = inputs.ip(ip);
            }
            "header" => {
                let Value::Object(headers) = value else {
                    return Err(bad(
                        "key.header: must be an object of header names and values".into(),
                    ));
                };
                if headers.is_empty() {
                    return Err(bad("key.header: names no header".into()));
                }
                let mut seen = HashSet::with_capacity(headers.len());
                for (name, value) in headers {
                    // Header names have no case: two spellings of one name
                    // are one header named twice.
                    if !seen.insert(name.to_ascii_lowercase()) {
                        return Err(bad(format!(
                            "duplicate field {:?} (header names have no case)",
                            clip(&format!("key.header.{name}"))
                        )));
                    }
                    let valid = !name.is_empty()
                        && name.len() <= 256
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                    if !valid {
                        return Err(bad(format!(
                            "key.header: {:?} is not a header name",
                            clip(name)
                        )));
                    }
                    let value = text(&format!("header.{name}"), value)?;
                    label.push(format!(
                        "header:{}={}",
                        name.to_ascii_lowercase(),
                        redact(&value)
                    ));
                    inputs = inputs.header(name.as_str(), value);
                }
            }
            "claim" => {
                let claim = text("claim", value)?;
                label.push(format!("claim={}", clip(&claim)));
                inputs = inputs.claim(claim);
            }
            "route" => {
                let route = text("route", value)?;
                label.push(format!("route={}", clip(&route)));
                inputs = inputs.route(route);
            }
            "user_agent" => {
                let ua = text("user_agent", value)?;
                label.push(format!("user-agent={}", clip(&ua)));
                inputs = inputs.user_agent(ua);
            }
            "tls_fingerprint" => {
                let fp = text("tls_fingerprint", value)?;
                label.push(format!("tls={}", clip(&fp)));
                inputs = inputs.tls_fingerprint(fp);
            }
            other => {
                return Err(bad(format!(
                    "key: unknown input {:?} (ip, header, claim, route, user_agent, tls_fingerprint or raw)",
                    clip(other)
                )));
            }
        }
    }
    match admin.layer.key_for(rule, &inputs) {
        Some(Ok(key)) => Ok((key, label.join(" "))),
        Some(Err(why)) => Err(bad(format!("key: rule {rule:?} {why}"))),
        None => Err((
            StatusCode::NOT_IMPLEMENTED,
            format!(
                "rule {rule:?} cannot derive its keys from inputs: name the key with {{\"raw\": ...}}"
            ),
        )),
    }
}

/// A secret shown in a label or a log: its first 4 characters (none if it
/// has 8 or fewer), `…`, and its length in bytes.
pub(crate) fn redact(secret: &str) -> String {
    let len = secret.len();
    if secret.chars().count() <= 8 {
        return format!("…({len})");
    }
    let head: String = secret.chars().take(4).collect();
    format!("{head}…({len})")
}

/// At most 64 characters of an operator's text (a label, an echo in an
/// error), so that huge input stays out of logs and answers.
pub(crate) fn clip(text: &str) -> String {
    if text.chars().count() <= 64 {
        return text.to_owned();
    }
    let head: String = text.chars().take(64).collect();
    format!("{head}…({})", text.len())
}

/// An operation's failure as an answer: 501 for what the rule or backend
/// does not do, 503 while the backend cannot be asked, 409 for a state that
/// refuses it (a rule holding as many blocks as it may).
fn op_error(e: &OpError) -> Response {
    let status = match e {
        OpError::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
        OpError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::CONFLICT,
    };
    error(status, e.to_string())
}

/// Seconds, rounded up (a block of 0.2 s left is 1 s left).
fn secs_up(d: Duration) -> u64 {
    d.as_micros().div_ceil(1_000_000) as u64
}

/// `GET /admin/rules`: every rule, its algorithm, quota and penalty, and
/// how many keys it holds blocked.
async fn rules(State(admin): State<Admin>) -> Response {
    let rules = admin.layer.rules();
    let list: Vec<Value> = (0..rules.len())
        .map(|i| {
            let rule = rules.rule(i);
            let algorithm = rule.algorithm();
            let penalty = rule.penalty().map(|p| {
                json!({
                    "after": p.after(),
                    "within_secs": p.within().as_secs_f64(),
                    "block_secs": p.first_block().as_secs_f64(),
                    "max_block_secs": p.max_block().as_secs_f64(),
                    "memory_secs": p.memory_window().as_secs_f64(),
                })
            });
            let stats = rules.operate().block_stats(i);
            json!({
                "name": rule.name(),
                "algorithm": algorithm.name(),
                "limit": rule.quota().limit(),
                "period_secs": (!algorithm.is_concurrency()).then(|| rule.quota().period().as_secs_f64()),
                "shadow": rule.is_shadow(),
                "penalty": penalty,
                "blocked_now": stats.blocked_now,
                "blocks_started": stats.started,
            })
        })
        .collect();
    ok(json!({ "rules": list }))
}

/// `GET /admin/rules/{rule}/blocked`: the keys blocked now, soonest to end
/// first, by their labels.
async fn blocked(State(admin): State<Admin>, Path(name): Path<String>) -> Response {
    let rules = admin.layer.rules();
    let Some(index) = rules.index_of(&name) else {
        return error(
            StatusCode::NOT_FOUND,
            format!("no rule named {:?}", clip(&name)),
        );
    };
    let list: Vec<Value> = rules
        .operate()
        .blocked(index)
        .into_iter()
        .map(|(_, block, left)| {
            let (cause, level) = match block.cause {
                BlockCause::Operator => ("operator", None),
                BlockCause::Penalty { level } => ("penalty", Some(level)),
            };
            json!({
                "label": &*block.label,
                "seconds_left": secs_up(left),
                "cause": cause,
                "level": level,
            })
        })
        .collect();
    ok(json!({ "rule": name, "blocked": list }))
}

/// `POST /admin/inspect`: a key's state, spending nothing.
async fn inspect(State(admin): State<Admin>, req: Request) -> Result<Response, Refused> {
    let body = body_object(req.into_body()).await?;
    let t = target(&admin, &body, &[])?;
    Ok(
        match t.rules.operate().inspect(t.index, &t.key).wait().await {
            Ok(state) => ok(json!({
                "rule": t.name,
                "key": t.label,
                "limit": state.limit,
                "remaining": state.remaining,
                "reset_after_secs": secs_up(state.reset_after),
                "blocked_for_secs": state.blocked_for.map(secs_up),
                "degraded": state.degraded,
            })),
            Err(e) => op_error(&e),
        },
    )
}

/// Logs a change: who, what, which rule, the key's label.
fn log_change(peer: &str, operation: &str, t: &Target, detail: &str) {
    tracing::info!(
        target: "throttle::admin",
        peer = %peer,
        operation,
        rule = %t.name,
        key = %t.label,
        "admin: {operation} {detail}"
    );
}

/// The body and target of a changing operation, or the answer refusing it.
async fn changing(
    admin: &Admin,
    req: Request,
    extra: &[&str],
) -> Result<(Target, Map<String, Value>), Refused> {
    let body = body_object(req.into_body()).await?;
    let t = target(admin, &body, extra)?;
    Ok((t, body))
}

/// A changing operation's answer: `body` and a log line (`what`, `detail`)
/// when it was done, the error's answer when it was not.
fn done(
    peer: &str,
    what: &str,
    t: &Target,
    detail: &str,
    result: Result<Value, OpError>,
) -> Response {
    match result {
        Ok(body) => {
            log_change(peer, what, t, detail);
            ok(body)
        }
        Err(e) => op_error(&e),
    }
}

/// `POST /admin/reset`: forgets a key's counts (a block stays).
async fn reset(State(admin): State<Admin>, req: Request) -> Result<Response, Refused> {
    let peer = peer_of(&req);
    let (t, _) = changing(&admin, req, &[]).await?;
    let result = t.rules.operate().reset(t.index, &t.key).wait().await;
    let body = json!({ "rule": t.name, "key": t.label, "reset": true });
    Ok(done(&peer, "reset", &t, "", result.map(|()| body)))
}

/// `POST /admin/block` with `seconds`: denies a key's requests until then.
async fn block(State(admin): State<Admin>, req: Request) -> Result<Response, Refused> {
    let peer = peer_of(&req);
    let (t, body) = changing(&admin, req, &["seconds"]).await?;
    let seconds = match body.get("seconds") {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(f64::NAN),
        Some(_) => {
            return Err(Refused::new(
                StatusCode::BAD_REQUEST,
                "seconds: must be a number",
            ));
        }
        None => return Err(Refused::new(StatusCode::BAD_REQUEST, "seconds: is missing")),
    };
    if !(0.001..=MAX_BLOCK_SECS).contains(&seconds) {
        return Err(Refused::new(
            StatusCode::BAD_REQUEST,
            format!("seconds: must be from 0.001 to {MAX_BLOCK_SECS} (30 days)"),
        ));
    }
    let duration = Duration::from_secs_f64(seconds);
    let result = t
        .rules
        .operate()
        .block(t.index, &t.key, duration, &t.label)
        .wait()
        .await;
    let detail = format!("for {seconds} s");
    Ok(match result {
        Ok(reach) => {
            let answer = json!({
                "rule": t.name,
                "key": t.label,
                "blocked_for_secs": secs_up(duration),
                "reach": reach_name(reach),
            });
            shared(&peer, "block", &t, &detail, reach, answer)
        }
        Err(e) => op_error(&e),
    })
}

/// `POST /admin/unblock`: lifts a key's block.
async fn unblock(State(admin): State<Admin>, req: Request) -> Result<Response, Refused> {
    let peer = peer_of(&req);
    let (t, _) = changing(&admin, req, &[]).await?;
    let result = t.rules.operate().unblock(t.index, &t.key).wait().await;
    Ok(match result {
        Ok((was, reach)) => {
            let detail = if was { "" } else { "(was not blocked)" };
            let answer = json!({
                "rule": t.name,
                "key": t.label,
                "was_blocked": was,
                "reach": reach_name(reach),
            });
            shared(&peer, "unblock", &t, detail, reach, answer)
        }
        Err(e) => op_error(&e),
    })
}

/// How far a block or unblock reached, as the answer names it.
fn reach_name(reach: Reach) -> &'static str {
    match reach {
        Reach::Fleet => "fleet",
        Reach::Queued => "queued",
        _ => "instance",
    }
}

/// A block's or unblock's answer, and its log line: 200 when the fleet
/// (or a backend without one) has it, 202 when it holds on this instance
/// and waits there for Redis to answer again.
fn shared(
    peer: &str,
    what: &str,
    t: &Target,
    detail: &str,
    reach: Reach,
    answer: Value,
) -> Response {
    if reach == Reach::Queued {
        let detail = format!(
            "{detail} (holds on this instance; sent to the fleet when Redis answers again)"
        );
        log_change(peer, what, t, detail.trim_start());
        reply(StatusCode::ACCEPTED, &answer)
    } else {
        log_change(peer, what, t, detail);
        ok(answer)
    }
}

/// The `units` of a penalize or reward: a whole number from 1 to 2^32 - 1.
fn units(body: &Map<String, Value>) -> Result<u64, Refused> {
    match body.get("units") {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(u) if (1..=u64::from(u32::MAX)).contains(&u) => Ok(u),
            _ => Err(Refused::new(
                StatusCode::BAD_REQUEST,
                format!("units: must be a whole number from 1 to {}", u32::MAX),
            )),
        },
        Some(_) => Err(Refused::new(
            StatusCode::BAD_REQUEST,
            "units: must be a number",
        )),
        None => Err(Refused::new(StatusCode::BAD_REQUEST, "units: is missing")),
    }
}

/// `POST /admin/penalize` with `units`: takes up to that many from a key.
async fn penalize(State(admin): State<Admin>, req: Request) -> Result<Response, Refused> {
    let peer = peer_of(&req);
    let (t, body) = changing(&admin, req, &["units"]).await?;
    let units = units(&body)?;
    let result = t
        .rules
        .operate()
        .penalize(t.index, &t.key, units)
        .wait()
        .await;
    let detail = match &result {
        Ok(taken) => format!("{taken} of {units} units taken"),
        Err(_) => String::new(),
    };
    let answer = result.map(|taken| json!({ "rule": t.name, "key": t.label, "taken": taken }));
    Ok(done(&peer, "penalize", &t, &detail, answer))
}

/// `POST /admin/reward` with `units`: gives up to that many back.
async fn reward(State(admin): State<Admin>, req: Request) -> Result<Response, Refused> {
    let peer = peer_of(&req);
    let (t, body) = changing(&admin, req, &["units"]).await?;
    let units = units(&body)?;
    let result = t
        .rules
        .operate()
        .reward(t.index, &t.key, units)
        .wait()
        .await;
    let answer = json!({ "rule": t.name, "key": t.label, "given": units });
    let detail = format!("{units} units given back");
    Ok(done(&peer, "reward", &t, &detail, result.map(|()| answer)))
}

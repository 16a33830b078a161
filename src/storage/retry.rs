//! How an object store mount retries failed requests: a mount's `retry`
//! table, turned into `object_store`'s `RetryConfig`.
//!
//! `object_store` retries a request that failed in a way retrying can help
//! (a connection error or reset, a timeout of an idempotent request, a 5xx
//! or 429 answer) with exponential backoff, at most `max_retries` times and
//! for at most `timeout_ms` from the first attempt; then the error reaches
//! zarrd, which answers 503 `storage_unavailable` or 504 `storage_timeout`
//! with `Retry-After`. The per-request time limit and the connect time
//! limit are client options, set in the mount's `options` (`timeout =
//! "5s"`, `connect_timeout = "2s"`). Unset fields keep `object_store`'s
//! defaults (10 retries within 3 minutes, backoff from 100 ms to 15 s).
//!
//! ```toml
//! [mounts.lake]
//! url = "s3://bucket/zarr"
//! retry = { max_retries = 3, timeout_ms = 10000, initial_backoff_ms = 50, max_backoff_ms = 2000 }
//! [mounts.lake.options]
//! timeout = "5s"
//! ```

use std::time::Duration;

use object_store::{BackoffConfig, RetryConfig};
use serde::{Deserialize, Serialize};

/// The longest retry window, backoff or retry count accepted (bounds that
/// keep a misconfiguration from holding a request for hours).
const MAX_RETRIES: usize = 100;
const MAX_WINDOW_MS: u64 = 3_600_000;

/// A mount's retry settings (see the module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrySpec {
    /// Retries after the first attempt (0: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<usize>,
    /// No retry starts later than this after the first attempt, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The pause before the first retry, in milliseconds (it doubles per retry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_backoff_ms: Option<u64>,
    /// The longest pause between retries, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff_ms: Option<u64>,
}

impl RetrySpec {
    /// The `object_store` configuration, or the reason the settings are
    /// refused (naming the field).
    ///
    /// # Errors
    /// A message naming the field out of range.
    pub fn to_config(&self) -> Result<RetryConfig, String> {
        let mut config = RetryConfig::default();
        let ms = |field: &str, v: Option<u64>, default: Duration| match v {
            None => Ok(default),
            Some(v) if v <= MAX_WINDOW_MS => Ok(Duration::from_millis(v)),
            Some(v) => Err(format!("retry.{field} = {v}: at most {MAX_WINDOW_MS} (one hour)")),
        };
        if let Some(n) = self.max_retries {
            if n > MAX_RETRIES {
                return Err(format!("retry.max_retries = {n}: at most {MAX_RETRIES}"));
            }
            config.max_retries = n;
        }
        config.retry_timeout = ms("timeout_ms", self.timeout_ms, config.retry_timeout)?;
        let init = ms("initial_backoff_ms", self.initial_backoff_ms, config.backoff.init_backoff)?;
        let max = ms("max_backoff_ms", self.max_backoff_ms, config.backoff.max_backoff)?;
        if init > max {
            return Err(format!(
                "retry.initial_backoff_ms ({} ms) is longer than retry.max_backoff_ms ({} ms)",
                init.as_millis(),
                max.as_millis()
            ));
        }
        config.backoff = BackoffConfig { init_backoff: init, max_backoff: max, base: config.backoff.base };
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_become_object_store_config() {
        let spec: RetrySpec =
            toml::from_str("max_retries = 2\ntimeout_ms = 5000\ninitial_backoff_ms = 10\nmax_backoff_ms = 200")
                .unwrap();
        let c = spec.to_config().unwrap();
        assert_eq!(c.max_retries, 2);
        assert_eq!(c.retry_timeout, Duration::from_secs(5));
        assert_eq!(c.backoff.init_backoff, Duration::from_millis(10));
        assert_eq!(c.backoff.max_backoff, Duration::from_millis(200));
        let d = RetrySpec::default().to_config().unwrap();
        assert_eq!((d.max_retries, d.retry_timeout), (10, Duration::from_secs(180)));
    }

    #[test]
    fn bad_settings_name_the_field() {
        let e = RetrySpec { max_retries: Some(1 << 40), ..RetrySpec::default() }.to_config().unwrap_err();
        assert!(e.contains("retry.max_retries"), "{e}");
        let e = RetrySpec { timeout_ms: Some(u64::MAX), ..RetrySpec::default() }.to_config().unwrap_err();
        assert!(e.contains("retry.timeout_ms"), "{e}");
        let e = RetrySpec { initial_backoff_ms: Some(500), max_backoff_ms: Some(100), ..RetrySpec::default() }
            .to_config()
            .unwrap_err();
        assert!(e.contains("initial_backoff_ms"), "{e}");
        assert!(toml::from_str::<RetrySpec>("retries = 3").unwrap_err().to_string().contains("retries"));
    }
}

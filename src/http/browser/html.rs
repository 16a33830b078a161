//! HTML building blocks of the browser: escaping, URL segments, the page
//! frame and its style sheet (compiled in; no script, no CDN).
//!
//! Everything taken from a request or from stored documents (names, keys,
//! attribute values, codec configurations) goes through [`esc`] in text and
//! attribute values, and through [`seg`] in URLs; the pages carry a
//! Content-Security-Policy that allows no script at all.

use std::fmt::Write as _;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Characters kept as they are in a path segment of a link.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// The Content-Security-Policy of every page: no scripts, styles only from
/// the page itself, images (previews) only from zarrd.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// `text` escaped for HTML text and quoted attribute values.
#[must_use]
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One path segment, percent-encoded for a URL.
#[must_use]
pub fn seg(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// A `/`-separated path, each segment percent-encoded.
#[must_use]
pub fn path_url(path: &str) -> String {
    path.split('/').filter(|s| !s.is_empty()).map(seg).collect::<Vec<_>>().join("/")
}

/// A shape as `[3, 4]` (`[]` for a scalar).
#[must_use]
pub fn shape_text(shape: &[u64]) -> String {
    let items: Vec<String> = shape.iter().map(u64::to_string).collect();
    format!("[{}]", items.join(", "))
}

/// A byte count for people: `1.5 MiB`.
#[must_use]
pub fn bytes_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// A breadcrumb trail: `zarrd / mount / a / b`, each a link but the last.
#[must_use]
pub fn crumbs(mount: Option<&str>, path: &str) -> String {
    let mut out = String::from("<nav class=\"crumbs\" aria-label=\"breadcrumbs\"><a href=\"/\">zarrd</a>");
    if let Some(m) = mount {
        let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let mut href = format!("/browse/{}/", seg(m));
        let _ = write!(out, " / <a href=\"{}\">{}</a>", esc(&href), esc(m));
        for (i, p) in parts.iter().enumerate() {
            href.push_str(&seg(p));
            href.push('/');
            if i + 1 == parts.len() {
                let _ = write!(out, " / <span aria-current=\"page\">{}</span>", esc(p));
            } else {
                let _ = write!(out, " / <a href=\"{}\">{}</a>", esc(&href), esc(p));
            }
        }
    }
    out.push_str("</nav>");
    out
}

/// A whole page: `title` (escaped here), the breadcrumbs and the body (HTML).
#[must_use]
pub fn page(title: &str, crumbs: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · zarrd</title><style>{STYLE}</style></head>\
         <body><header>{crumbs}</header><main>{body}</main>\
         <footer><a href=\"/docs\">API documentation</a> · <a href=\"/openapi.json\">OpenAPI</a></footer></body></html>\n",
        esc(title)
    )
}

/// The style sheet.
const STYLE: &str = "\
:root{color-scheme:light dark;--fg:#1b1f24;--bg:#fff;--mut:#5b6570;--line:#d8dde3;--acc:#0b5cad;--code:#f3f5f7}\
@media (prefers-color-scheme:dark){:root{--fg:#e6e8eb;--bg:#14171a;--mut:#9aa4ae;--line:#2c3238;--acc:#6cb2ff;--code:#1d2226}}\
*{box-sizing:border-box}body{margin:0;font:15px/1.5 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;color:var(--fg);background:var(--bg)}\
header{padding:.8rem 1.5rem;border-bottom:1px solid var(--line)}main{padding:1rem 1.5rem;max-width:78rem}\
footer{padding:1rem 1.5rem;color:var(--mut);border-top:1px solid var(--line);font-size:.85rem}\
a{color:var(--acc);text-decoration:none}a:hover{text-decoration:underline}\
.crumbs{font-weight:600}h1{font-size:1.4rem;margin:.4rem 0 .8rem;word-break:break-all}h2{font-size:1.1rem;margin:1.4rem 0 .5rem}\
.badge{display:inline-block;font-size:.75rem;padding:.05rem .45rem;border:1px solid var(--line);border-radius:.6rem;color:var(--mut);margin-left:.4rem;vertical-align:middle}\
table{border-collapse:collapse;margin:.3rem 0}th,td{text-align:left;padding:.25rem .8rem .25rem 0;border-bottom:1px solid var(--line);vertical-align:top}\
th{color:var(--mut);font-weight:500}td.num{text-align:right;font-variant-numeric:tabular-nums}\
pre,code{font:13px/1.45 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;background:var(--code)}\
pre{padding:.6rem .8rem;overflow:auto;max-height:28rem;border-radius:.3rem}code{padding:0 .2rem;border-radius:.2rem}\
.grid{display:flex;flex-wrap:wrap;gap:1.5rem;align-items:flex-start}.preview{border:1px solid var(--line);image-rendering:pixelated;width:min(100%,320px);height:auto;background:repeating-conic-gradient(#8884 0 25%,transparent 0 50%) 0 0/16px 16px}\
.pager{margin:.6rem 0;color:var(--mut)}.pager a{margin-right:1rem}.note{color:var(--mut)}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_covers_text_and_attributes() {
        assert_eq!(
            esc("<script>alert('x')</script> & \"y\""),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;y&quot;"
        );
        assert_eq!(seg("a b/c?d#e"), "a%20b%2Fc%3Fd%23e");
        assert_eq!(path_url("a b/c"), "a%20b/c");
        assert_eq!(shape_text(&[3, 4]), "[3, 4]");
        assert_eq!(bytes_text(1536), "1.5 KiB");
        assert_eq!(bytes_text(12), "12 B");
        let c = crumbs(Some("m<"), "a/b\"");
        assert!(c.contains("href=\"/browse/m%3C/a/\"") && c.contains("b&quot;") && !c.contains("m<"), "{c}");
    }
}

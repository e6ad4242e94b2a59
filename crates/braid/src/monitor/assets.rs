//! The dashboard's files, embedded in the binary: nothing is fetched from anywhere else
//! (the page's Content-Security-Policy says so to the browser too).

/// The page.
pub const INDEX_HTML: &str = include_str!("assets/index.html");
/// Its script: plain JavaScript, canvas charts, the `/events` stream.
pub const APP_JS: &str = include_str!("assets/app.js");
/// Its style.
pub const STYLE_CSS: &str = include_str!("assets/style.css");
/// The tab's icon.
pub const FAVICON_SVG: &str = include_str!("assets/favicon.svg");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_fetched_from_outside() {
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("app.js", APP_JS),
            ("style.css", STYLE_CSS),
        ] {
            for bad in ["http://", "https://", "//cdn", "@import"] {
                assert!(!text.contains(bad), "{name} refers to {bad}");
            }
        }
        assert!(INDEX_HTML.contains("src=\"app.js\""));
        assert!(INDEX_HTML.contains("href=\"style.css\""));
    }
}

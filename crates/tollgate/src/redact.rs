//! Store URLs in messages without their credentials.

/// `url` with any user name and password replaced by `***`, for error
/// messages and logs (`redis://user:pw@host:6379/1` becomes
/// `redis://***@host:6379/1`). Text that is not a URL with credentials is
/// returned unchanged.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}***{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_credentials() {
        assert_eq!(redact_url("redis://:secret@host:1/2"), "redis://***@host:1/2");
        assert_eq!(redact_url("rediss://u:p@h"), "rediss://***@h");
        assert_eq!(redact_url("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact_url("nonsense"), "nonsense");
    }
}

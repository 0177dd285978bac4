//! Email addresses as the service accepts them: staff logins and `ADMIN_EMAIL`.

/// A syntactic email check: something@something.tld, no spaces or control characters,
/// ≤ 254 bytes.
pub fn valid_email(email: &str) -> bool {
    let Some((local, domain)) = email.split_once('@') else {
        return false;
    };
    email.len() <= 254
        && !local.is_empty()
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !email.contains(|c: char| c.is_whitespace() || c.is_control())
        && !domain.contains('@')
}

//! Which addresses may receive our webhooks, and the URL check that resolves an endpoint's host
//! once and hands the sender exactly the addresses it judged.
//!
//! An address is public ([`is_public`]) when, in this order:
//!
//! 1. an IPv4 address carried inside an IPv6 one is judged as that IPv4 address: IPv4-mapped
//!    (`::ffff:0:0/96`, how a dual-stack socket reaches IPv4), NAT64's well-known prefix
//!    (`64:ff9b::/96`, RFC 6052: what a DNS64 resolver answers for an IPv4-only name) and 6to4
//!    (`2002::/16`, RFC 3056: the IPv4 address in bits 16–47). A gateway on our side would
//!    take `64:ff9b::a00:1` to `10.0.0.1`;
//! 2. any other IPv6 address is global unicast (`2000::/3`, the only unicast space in IANA's
//!    IPv6 Address Space registry). This alone refuses loopback, unspecified, IPv4-compatible
//!    (`::a.b.c.d`, deprecated by RFC 4291), NAT64's local-use prefix (`64:ff9b:1::/48`),
//!    discard-only, unique local, link-local, site-local (`fec0::/10`, deprecated by RFC 3879)
//!    and multicast;
//! 3. it is in no block of IANA's IPv4 and IPv6 Special-Purpose Address Registries — private
//!    use, shared (`100.64.0.0/10`), loopback, link-local, benchmarking (`198.18.0.0/15`),
//!    documentation, protocol assignments, reserved, Teredo, ORCHID, SRv6 SIDs, … — not even
//!    the few blocks marked globally reachable (anycast services such as AS112), where no
//!    webhook receiver lives. The blocks are the `iprfc` crate's `RFC6890` table, generated
//!    from its checked-in, checksummed snapshot of both registries, so a new registry entry
//!    arrives with a dependency update rather than an edit here;
//! 4. it is not IPv4 multicast (`224.0.0.0/4`, IANA's multicast registry);
//! 5. it is not in [`HOST_ADDRESSES`]: public addresses that reach the cloud host's own agent,
//!    which no registry lists. (The metadata services of AWS, GCP and the others are
//!    link-local or unique local, refused above.)

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use ipnet::{Ipv4Net, Ipv6Net};
use iprfc::RFC6890;

/// Why an endpoint URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefusal {
    #[error("must be an absolute URL")]
    NotAUrl,
    #[error("must use https")]
    NotHttps,
    #[error("must not carry a user name or password")]
    Credentials,
    #[error("does not resolve: {0}")]
    Unresolvable(String),
    #[error("resolves to a private, loopback or link-local address ({0})")]
    Private(IpAddr),
}

/// Global unicast IPv6 (IANA IPv6 Address Space registry).
const GLOBAL_UNICAST: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2000, 0, 0, 0, 0, 0, 0, 0), 3);
/// NAT64's well-known prefix (RFC 6052): the IPv4 address is the last 32 bits.
const NAT64: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96);
/// 6to4 (RFC 3056): the IPv4 address follows the 16-bit prefix.
const SIX_TO_FOUR: Ipv6Net = Ipv6Net::new_assert(Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16);

/// Public addresses of a cloud host's own services, in no IANA registry: Azure's platform
/// endpoint (WireServer and its metadata), reachable from every Azure VM.
pub const HOST_ADDRESSES: [Ipv4Net; 1] = [Ipv4Net::new_assert(Ipv4Addr::new(168, 63, 129, 16), 32)];

/// Whether `ip` may receive our webhooks (the policy in the module doc).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => match embedded_ipv4(v6) {
            Some(v4) => is_public_v4(v4),
            None => GLOBAL_UNICAST.contains(&v6) && !RFC6890.contains(&ip),
        },
    }
}

fn is_public_v4(v4: Ipv4Addr) -> bool {
    !(RFC6890.contains(&IpAddr::V4(v4))
        || v4.is_multicast()
        || HOST_ADDRESSES.iter().any(|n| n.contains(&v4)))
}

/// The IPv4 address an IPv4-mapped, NAT64 or 6to4 address carries.
fn embedded_ipv4(v6: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    let o = v6.octets();
    if NAT64.contains(&v6) {
        return Some(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    if SIX_TO_FOUR.contains(&v6) {
        return Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]));
    }
    None
}

/// Checks an endpoint URL and resolves it: `https` (or, with `allow_private`, `http` too), no
/// credentials, and every address it resolves to public unless `allow_private`. Returns the
/// parsed URL and the addresses to connect to (only these: a second lookup could answer
/// otherwise).
pub async fn check_url(
    url: &str,
    allow_private: bool,
) -> Result<(url::Url, Vec<SocketAddr>), UrlRefusal> {
    let parsed = url::Url::parse(url).map_err(|_| UrlRefusal::NotAUrl)?;
    match parsed.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(UrlRefusal::NotHttps),
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(UrlRefusal::Credentials);
    }
    let host = parsed.host_str().ok_or(UrlRefusal::NotAUrl)?.to_string();
    let port = parsed.port_or_known_default().ok_or(UrlRefusal::NotAUrl)?;
    let host_for_lookup = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host_for_lookup.as_str(), port))
        .await
        .map_err(|e| UrlRefusal::Unresolvable(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(UrlRefusal::Unresolvable("no address".into()));
    }
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(UrlRefusal::Private(bad.ip()));
    }
    Ok((parsed, addrs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "255.255.255.255",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    /// IANA's special-purpose registries, every IPv4 address embedded in an IPv6 one, the
    /// IPv6 space outside global unicast, and the cloud host addresses no registry lists.
    #[test]
    fn special_purpose_embedded_and_host_addresses_are_refused() {
        let refused = [
            // NAT64 (well-known and local-use prefixes) of private addresses.
            "64:ff9b::a00:1",
            "64:ff9b::7f00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::a00:1",
            // 6to4 of private addresses.
            "2002:a00:1::1",
            "2002:c0a8:101::1",
            "2002:7f00:1::",
            "2002:a9fe:a9fe::1",
            // IPv4-compatible (deprecated), private or not.
            "::a00:1",
            "::7f00:1",
            "::5db8:d822",
            // Site-local (deprecated), multicast, discard, Teredo, benchmarking, ORCHID,
            // documentation, SRv6, unique local (the AWS metadata service).
            "fec0::1",
            "feff::1",
            "ff02::1",
            "100::1",
            "2001::1",
            "2001:2::1",
            "2001:20::1",
            "2001:db8::1",
            "3fff::1",
            "5f00::1",
            "fd00:ec2::254",
            // IPv4: benchmarking, shared (CGNAT), IETF protocol assignments, the deprecated
            // 6to4 relay, multicast, reserved, Azure's host endpoint.
            "198.18.0.1",
            "198.19.255.254",
            "100.64.0.1",
            "100.127.255.254",
            "192.0.0.8",
            "192.88.99.1",
            "224.0.0.1",
            "240.0.0.1",
            "168.63.129.16",
            "::ffff:198.18.0.1",
            "::ffff:168.63.129.16",
        ]
        .into_iter()
        .map(|ip| (ip, false));
        let public = [
            // A public IPv4 address reached through NAT64 or 6to4 is that address.
            "64:ff9b::5db8:d822",
            "2002:5db8:d822::1",
            "::ffff:93.184.216.34",
            "8.8.8.8",
            "168.63.129.17",
            "198.20.0.1",
            "100.128.0.1",
            "2a00:1450:4001::1",
            "2001:4860:4860::8888",
        ]
        .into_iter()
        .map(|ip| (ip, true));
        let wrong: Vec<String> = refused
            .chain(public)
            .filter(|(ip, public)| is_public(ip.parse().unwrap()) != *public)
            .map(|(ip, public)| {
                format!(
                    "{ip} should be {}",
                    if public { "public" } else { "refused" }
                )
            })
            .collect();
        assert_eq!(wrong, Vec::<String>::new());
    }

    #[tokio::test]
    async fn urls_must_be_https_and_public_unless_allowed() {
        assert_eq!(
            check_url("http://1.1.1.1/hook", false).await.unwrap_err(),
            UrlRefusal::NotHttps
        );
        assert_eq!(
            check_url("https://127.0.0.1/hook", false)
                .await
                .unwrap_err(),
            UrlRefusal::Private("127.0.0.1".parse().unwrap())
        );
        assert_eq!(
            check_url("https://[::1]:8443/hook", false)
                .await
                .unwrap_err(),
            UrlRefusal::Private("::1".parse().unwrap())
        );
        assert_eq!(
            check_url("https://u:p@1.1.1.1/", false).await.unwrap_err(),
            UrlRefusal::Credentials
        );
        assert_eq!(
            check_url("not a url", false).await.unwrap_err(),
            UrlRefusal::NotAUrl
        );
        assert!(check_url("https://1.1.1.1/hook", false).await.is_ok());
        assert!(check_url("http://127.0.0.1:9/hook", true).await.is_ok());
    }
}

//! Staff roles, ranked: `owner` ⊇ `admin` ⊇ `support` ⊇ `viewer`, so a route names the least
//! role that may call it ([`Role::allows`]). The table of which route needs which role is the
//! router (`api::router`) and docs/staff.md.

crate::text_enum! {
    /// What a staff account may do, from most to least.
    pub enum Role {
        /// Everything, and manages staff accounts.
        Owner => "owner",
        /// Everything but staff accounts.
        Admin => "admin",
        /// Reads everything; grants and corrects memberships, cancels orders, retries effects.
        Support => "support",
        /// Reads only.
        Viewer => "viewer",
    }
}

impl Role {
    /// Higher may do more.
    const fn rank(self) -> u8 {
        match self {
            Role::Owner => 3,
            Role::Admin => 2,
            Role::Support => 1,
            Role::Viewer => 0,
        }
    }

    /// Whether an account of this role may call a route that needs `required`.
    pub const fn allows(self, required: Role) -> bool {
        self.rank() >= required.rank()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ranked() {
        use Role::*;
        let allowed = |who: Role| {
            Role::ALL
                .iter()
                .filter(|&&r| who.allows(r))
                .copied()
                .collect::<Vec<_>>()
        };
        assert_eq!(allowed(Owner), vec![Owner, Admin, Support, Viewer]);
        assert_eq!(allowed(Admin), vec![Admin, Support, Viewer]);
        assert_eq!(allowed(Support), vec![Support, Viewer]);
        assert_eq!(allowed(Viewer), vec![Viewer]);
    }
}

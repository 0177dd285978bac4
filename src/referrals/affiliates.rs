//! Affiliates (`affiliates`): partners by name and buyers, each with a code and a link.

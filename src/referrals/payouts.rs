//! Payouts (`payouts`).

//! The commission ledger's writes (`commission_lines`): a payment's line and its reversal.

//! Clicks and attributions (`referral_clicks`, `referral_attributions`).

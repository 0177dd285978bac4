//! The Mini App: its page (`/app/`) in a real browser, as a buyer sees it inside Telegram.

mod page;

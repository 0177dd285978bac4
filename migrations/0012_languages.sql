-- The bot speaks the buyer's language: English (the default), Ukrainian, Russian.

-- The language the bot speaks to a subscriber (chosen with /language, set by staff, or their
-- Telegram app's when they first bought); NULL: the configured default.
ALTER TABLE subscribers
    ADD COLUMN language text
        CONSTRAINT subscribers_language_check CHECK (language IN ('en', 'uk', 'ru'));

-- Per-language titles and descriptions of channels and plans:
-- {"uk": {"title": "…", "description": "…"}, …}; a language without one falls back to the
-- default title and description. The API checks the shape; the schema keeps it an object.
ALTER TABLE channels
    ADD COLUMN translations jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT channels_translations_check CHECK (jsonb_typeof(translations) = 'object');
ALTER TABLE plans
    ADD COLUMN translations jsonb NOT NULL DEFAULT '{}'
        CONSTRAINT plans_translations_check CHECK (jsonb_typeof(translations) = 'object');

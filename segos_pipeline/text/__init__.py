"""Text layer (bottom): tokenisation and stemming, the token tables of a library, skill-name matching."""

"""Reading corpora: input formats, sentence splitting, hashed words and bigrams per sentence."""

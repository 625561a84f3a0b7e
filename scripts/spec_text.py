"""Real English text for the speculative-decoding bench: public-domain passages (the openings of
Pride and Prejudice, A Tale of Two Cities and Moby-Dick, from their first editions, as Project
Gutenberg prints them) and chat prompts, embedded so a host without corpora runs it."""

PASSAGES = (
    "It is a truth universally acknowledged, that a single man in possession of a good "
    "fortune, must be in want of a wife. However little known the feelings or views of such a "
    "man may be on his first entering a neighbourhood, this truth is so well fixed in the minds "
    "of the surrounding families, that he is considered the rightful property of some one or "
    'other of their daughters. "My dear Mr. Bennet," said his lady to him one day, "have you '
    'heard that Netherfield Park is let at last?" Mr. Bennet replied that he had not.',
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the "
    "age of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the "
    "season of Light, it was the season of Darkness, it was the spring of hope, it was the "
    "winter of despair, we had everything before us, we had nothing before us, we were all "
    "going direct to Heaven, we were all going direct the other way.",
    "Call me Ishmael. Some years ago, never mind how long precisely, having little or no money "
    "in my purse, and nothing particular to interest me on shore, I thought I would sail about "
    "a little and see the watery part of the world. It is a way I have of driving off the "
    "spleen and regulating the circulation. Whenever I find myself growing grim about the "
    "mouth; whenever it is a damp, drizzly November in my soul; then, I account it high time to "
    "get to sea as soon as I can.",
)

# copy-heavy: the answer repeats text the prompt gives
COPY_TEMPLATE = "Repeat the following passage exactly, word for word:\n\n{passage}"

# ordinary: free-form answers, nothing to copy
CHAT_PROMPTS = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how photosynthesis works, step by step, to a ten-year-old.",
    "Describe the history of the printing press and how it changed Europe.",
    "Give me a detailed plan for learning to play the piano as an adult.",
)

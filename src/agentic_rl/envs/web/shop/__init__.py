"""``web-shop-v0``: a local web shop (Flask app over SQLite, served on 127.0.0.1) browsed with the
browser layer's actions, in a text browser or in Chromium; the database decides the reward
(:mod:`.env`). Flask, BeautifulSoup and requests (extra ``web``) are imported on first use."""

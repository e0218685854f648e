"""Why a copy survived: the replay of Inductor's reinplace rules, the culprit pass, the user's
source line, and the dumps that show it."""

// Placeholder until the command-line dispatcher lands.
int main() { return 0; }

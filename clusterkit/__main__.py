from clusterkit.cli import main

main()
